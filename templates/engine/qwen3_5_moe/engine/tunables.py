"""The engine's tunables: ``tunables.json`` beside this file, read once at load.

``tunables.json`` is ``{"values": {name: value}, "space": {name: [choices]}}``
(docs/CONTRACTS.md). The offline agent edits ``values`` only, picking from ``space``;
a coding agent may add a tunable by adding a field here and an entry in both maps.
What each one does is in ENGINE.md ("Tunables").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

PATH = Path(__file__).with_name("tunables.json")

#: Kernel launch keywords: tunable name -> (op group, keyword of the kernels' launcher).
LAUNCH = {
    "linear_block_m": ("linear", "block_m"),
    "linear_block_n": ("linear", "block_n"),
    "linear_block_k": ("linear", "block_k"),
    "linear_num_warps": ("linear", "num_warps"),
    "linear_num_stages": ("linear", "num_stages"),
    "moe_block_m": ("moe", "block_m"),
    "moe_block_n": ("moe", "block_n"),
    "moe_block_k": ("moe", "block_k"),
    "moe_num_warps": ("moe", "num_warps"),
    "moe_num_stages": ("moe", "num_stages"),
    "moe_gemv_block_n": ("moe", "gemv_block_n"),
    "moe_gemv_down_block_n": ("moe", "gemv_down_block_n"),
    "moe_gemv_num_warps": ("moe", "gemv_num_warps"),
    "moe_gemv_words": ("moe", "gemv_words"),
    "moe_gemv_unroll": ("moe", "gemv_unroll"),
    "moe_ops_s_max_t": ("moe_ops", "s_max_t"),
    "moe_ops_m_max_t": ("moe_ops", "m_max_t"),
    **{f"moe_ops_{b}_{f}": ("moe_ops", f"{b}_{f}") for b in "sml" for f in ("block_m", "block_n", "down_block_n", "split_k", "num_warps", "num_stages")},
}

#: Tunables for which 0 is a meaningful value (switches the feature off); the rest must be ≥ 1.
ZERO_OK = {"gdn_recurrent_prefill_max_tokens", "attention_decode_splits", "cuda_graph_max_batch", "moe_gemv_words", "moe_gemv_unroll",
           "moe_ops"}

#: The prefill ops switches (1 = engine/ops/<op>.py, 0 = the torch / serial path before them).
ZERO_OK |= {"gdn_prefill_ops", "attention_prefill_ops", "conv1d_prefill_ops"}

#: The KV cache layout switch (0 = static per-slot blocks) and the pool's headroom (0 % is allowed).
ZERO_OK |= {"kv_block_size", "kv_pool_headroom_pct"}

@dataclass(frozen=True)
class Tunables:
    """Values the runtime and the ops read.

    Attributes:
        gdn_chunk_size: tokens per chunk of the chunked Gated DeltaNet prefill (any positive
            size is exact; it trades intra-chunk matmul size against sequential chunk steps).
        gdn_recurrent_prefill_max_tokens: prefill forwards whose longest piece has at most this
            many tokens run the delta rule token by token (``kernels.gdn_recurrent_prefill``: no
            host sync, no tensor cores) instead of chunked; 0 = always chunked.
        attention_decode_splits: 0 = decode attention by torch SDPA over each batch's gathered
            K/V; N > 0 = the split-K kernel (``kernels/attention_decode.py``) with N splits per
            sequence and kv head, reading the cache in place (its torch reference on CPU).
        cuda_graph_max_batch: 0 = eager decode; N = decode steps of up to N sequences replay
            CUDA graphs captured at load for batch sizes 1, 2, 4, ..., N (``graphs.py``; needs
            ``attention_decode_splits > 0`` and NVFP4 experts on CUDA).
        prefill_chunk_tokens: most prompt tokens ``generate`` packs into one prefill forward;
            longer prompts are prefilled in pieces (chunked prefill).
        max_decode_batch: most sequences ``generate`` decodes in one step; more take turns.
        gdn_prefill_ops: 1 = ``ops/gdn_chunk.py`` (Triton chunked delta rule on CUDA, gates fused;
            its torch reference elsewhere); 0 = ``kernels.gdn_chunk_prefill`` (torch, host syncs).
        attention_prefill_ops: 1 = ``ops/attention_prefill.py`` (varlen flash attention on CUDA, gate
            fused, no host sync); 0 = SDPA per sequence with an explicit causal mask.
        conv1d_prefill_ops: 1 = ``ops/conv1d_prefill.py`` (parallel over token and channel blocks);
            0 = ``kernels.causal_conv1d_prefill`` (one program per sequence walks its tokens).
        linear_*: launch keywords of ``kernels.nvfp4_linear`` (block sizes, warps, stages);
            None leaves the launcher's own default.
        moe_*: launch keywords of ``kernels.moe_nvfp4``; None as above. ``moe_gemv_words`` (1/0):
            the decode GEMV reads the codes as int32 words and decodes two per op, or bytes;
            ``moe_gemv_unroll`` (1/0): its down projection unrolls the sum over the k experts;
            ``moe_gemv_block_n`` / ``moe_gemv_down_block_n`` / ``moe_gemv_num_warps``: its output rows per
            program (gate/up and down GEMV) and warps (an H200 sweep at T = 1 put 8 / 8 / 4 7 % ahead
            of the defaults 16 / 8 / 8).
        moe_ops: 1 = NVFP4 experts repacked at load and run by ``ops/moe_fused.moe_w4a16`` (one kernel
            family for every T, expert-major, split-K, one-launch align, fixed-order reduce; graph
            padding rows touch no expert); 0 = the ``kernels.moe_nvfp4`` path above.
        moe_ops_min_tokens: with ``moe_ops`` 1, forwards of fewer tokens T (the host shape; a CUDA-graph
            bucket's padded size, fixed at capture) still run ``kernels.moe_nvfp4`` (``moe.moe_path``). On
            the H200 (2026-12-02, real shapes, per layer) the new op was 3x slower at T = 1 (60.5 against
            21.1 us) and faster from T = 32 (290 against 391 us); nothing was measured between, 16 is the
            default. Above 1 the checkpoint-layout experts stay loaded beside the packed ones: about
            455 MB per layer, ~18 GB (17 GiB) more at full size on the 141 GB GPU; 1 = the new op at
            every T and the checkpoint layout freed at load.
        kv_block_size: 0 = static KV cache, one block of max_seq_len tokens per slot (memory
            max_batch x max_seq_len whatever the requests' lengths); N (a power of two) = paged KV
            (``kv_pool.KVPool``): a pool of N-token blocks shared by all sequences through a block
            table, blocks taken as a sequence grows and returned on release; the scheduler admits a
            request only when its prompt + max_tokens fit in the free blocks. Rendered 16 on CPU (CI
            runs the paged path: 16 divides none of the odd test lengths, and a 64-key attention
            tile spans 4 blocks) and 0 on GPUs: the paged kernels are not yet validated on the H200
            (``scripts/h200/paged_kv_check.sh`` is the check to run before flipping it).
        kv_pool_headroom_pct: with paged KV on CUDA, the pool takes the free device memory after
            the weights (``torch.cuda.mem_get_info``) less the GDN state, keeping this % of it free
            for activations, CUDA graphs and the allocator. Unused on CPU (the pool holds max_batch
            x max_seq_len there) and with ``kv_block_size`` 0.
        moe_ops_s_max_t / moe_ops_m_max_t: T bounds of its small and middle launch buckets;
            ``moe_ops_{s,m,l}_{block_m,block_n,down_block_n,split_k,num_warps,num_stages}``: each bucket's launch
            configuration (``ops.moe_fused.MoeBucket``); None = the op's defaults.
    """

    gdn_chunk_size: int = 64
    gdn_recurrent_prefill_max_tokens: int = 0
    attention_decode_splits: int = 0
    cuda_graph_max_batch: int = 0
    prefill_chunk_tokens: int = 2048
    max_decode_batch: int = 64
    gdn_prefill_ops: int = 1
    attention_prefill_ops: int = 1
    conv1d_prefill_ops: int = 1
    linear_block_m: int | None = None
    linear_block_n: int | None = None
    linear_block_k: int | None = None
    linear_num_warps: int | None = None
    linear_num_stages: int | None = None
    moe_block_m: int | None = None
    moe_block_n: int | None = None
    moe_block_k: int | None = None
    moe_num_warps: int | None = None
    moe_num_stages: int | None = None
    moe_gemv_block_n: int | None = None
    moe_gemv_down_block_n: int | None = None
    moe_gemv_num_warps: int | None = None
    moe_gemv_words: int | None = None
    moe_gemv_unroll: int | None = None
    moe_ops: int = 0
    moe_ops_min_tokens: int = 16
    moe_ops_s_max_t: int | None = None
    moe_ops_m_max_t: int | None = None
    moe_ops_s_block_m: int | None = None
    moe_ops_s_block_n: int | None = None
    moe_ops_s_down_block_n: int | None = None
    moe_ops_s_split_k: int | None = None
    moe_ops_s_num_warps: int | None = None
    moe_ops_s_num_stages: int | None = None
    moe_ops_m_block_m: int | None = None
    moe_ops_m_block_n: int | None = None
    moe_ops_m_down_block_n: int | None = None
    moe_ops_m_split_k: int | None = None
    moe_ops_m_num_warps: int | None = None
    moe_ops_m_num_stages: int | None = None
    moe_ops_l_block_m: int | None = None
    moe_ops_l_block_n: int | None = None
    moe_ops_l_down_block_n: int | None = None
    moe_ops_l_split_k: int | None = None
    moe_ops_l_num_warps: int | None = None
    moe_ops_l_num_stages: int | None = None
    kv_block_size: int = 0
    kv_pool_headroom_pct: int = 10

    def launch_keywords(self) -> dict[str, dict[str, int]]:
        """``{"linear": {...}, "moe": {...}, "moe_ops": {...}}``: the launch keywords that are set (not None) per op group."""
        out: dict[str, dict[str, int]] = {"linear": {}, "moe": {}, "moe_ops": {}}
        for name, (group, key) in LAUNCH.items():
            value = getattr(self, name)
            if value is not None:
                out[group][key] = value
        return out


def load_tunables(path: str | Path = PATH) -> Tunables:
    """Read and check ``tunables.json``.

    Raises:
        ValueError: the file is not ``{"values", "space"}`` JSON; a name in ``values`` is
            unknown or missing; a value is not a positive int (0 allowed for ``ZERO_OK``,
            None for launch keywords) or not one of its ``space`` choices. The message names the entry.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err}); restore it from git or fix the syntax") from None
    if not isinstance(data, dict) or not isinstance(data.get("values"), dict) or not isinstance(data.get("space"), dict):
        raise ValueError(f'{path} must be {{"values": {{...}}, "space": {{...}}}}')
    values, space = data["values"], data["space"]
    known = {f.name for f in fields(Tunables)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"{path}: unknown tunables {unknown}; known: {sorted(known)} (add a field to Tunables first)")
    missing = sorted(known - set(values))
    if missing:
        raise ValueError(f'{path}: tunables {missing} have no value; add them to "values"')
    for name, value in values.items():
        if value is None and name in LAUNCH:
            pass
        elif type(value) is not int or value < (0 if name in ZERO_OK else 1):
            allowed = "a positive int or null" if name in LAUNCH else "an int ≥ 0" if name in ZERO_OK else "a positive int"
            raise ValueError(f"{path}: tunable {name}={value!r} must be {allowed}")
        if name in space and value not in space[name]:
            raise ValueError(f"{path}: tunable {name}={value!r} is not one of its choices {space[name]}")
    return Tunables(**values)
