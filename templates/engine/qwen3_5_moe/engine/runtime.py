"""The ``Engine``: prefill, decode, release and generate over slots (docs/CONTRACTS.md, "The engine").

``prefill`` and ``decode`` are the parity surface (fp32 logits out); ``generate`` is a loop over
``scheduler.Scheduler`` (continuous batching: admit while slots are free, prefill in pieces of
``prefill_chunk_tokens``, decode the live sequences, free a slot as soon as its sequence ends),
for the benchmarks; ``metainfer serve`` drives the same scheduler step by step.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from .batch import make_batch
from .cache import CacheConfig, StateCache
from .graphs import DecodeGraphs, graph_sizes
from .kv_pool import pool_blocks_that_fit
from .model import ForwardOut, Model
from .sampling import SamplingParams
from .scheduler import Scheduler
from .target import ModelDims
from .tunables import Tunables
from .warmup import WarmupReport, warm_up
from .weights import Weights


@dataclass
class PrefillResult:
    """What ``Engine.prefill`` returns, one entry per prompt, in prompt order.

    Attributes:
        slots: the slot holding each sequence (pass them to ``decode``/``prefill``/``release``).
        logits: fp32 [T_i, V] per prompt, one row per prompt token.
        hidden: fp32 [L+1, T_i, H] per prompt (index 0 the embeddings, l+1 the output of layer l
            before the final norm), or None unless ``return_hidden``.
        mixer: fp32 [L, T_i, H] per prompt, layer l's token-mixer output (attention or Gated DeltaNet, before
            its residual add), or None unless ``return_hidden``.
    """

    slots: list[int]
    logits: list[torch.Tensor]
    hidden: list[torch.Tensor] | None = None
    mixer: list[torch.Tensor] | None = None


class Engine:
    """A loaded model with its slot state on one device; build it with ``engine.load``.

    Attributes:
        dims: the rendered target facts (``target.ModelDims``).
        device: where weights and state live.
        tunables: the values read from ``tunables.json`` at load.
        max_batch, max_seq_len: state capacity (slots, tokens per slot).
        cache: the ``StateCache``; ``cache.kv`` its KV pool (paged when ``cache_cfg.kv_block_size`` > 0:
            on CUDA without ``kv_num_blocks``, sized from the free memory after the weights, keeping
            ``tunables.kv_pool_headroom_pct`` % of it free).
    """

    def __init__(self, weights: Weights, dims: ModelDims, tunables: Tunables, device: torch.device, cache_cfg: CacheConfig):
        self.dims = dims
        self.device = device
        self.tunables = tunables
        self.max_batch = cache_cfg.max_batch
        self.max_seq_len = cache_cfg.max_seq_len
        self.model = Model(weights, dims, tunables, device)
        if cache_cfg.kv_block_size and cache_cfg.kv_num_blocks is None and device.type == "cuda":
            free, _ = torch.cuda.mem_get_info(device)
            n = pool_blocks_that_fit(free, tunables.kv_pool_headroom_pct, StateCache.gdn_bytes(dims, cache_cfg.max_batch),
                                     len(dims.full_attention_layers), cache_cfg.kv_block_size, dims.num_key_value_heads,
                                     dims.head_dim)
            cache_cfg = replace(cache_cfg, kv_num_blocks=n)
        self.cache = StateCache(dims, cache_cfg, device)
        self.graphs = None
        if tunables.cuda_graph_max_batch:
            sizes = graph_sizes(tunables.cuda_graph_max_batch, cache_cfg.max_batch)
            self.graphs = DecodeGraphs(self.model, self.cache, sizes, device)

    # ---- checks -------------------------------------------------------------------------
    def _check_tokens(self, seqs: list[list[int]], what: str) -> None:
        if not isinstance(seqs, (list, tuple)) or not seqs:
            raise ValueError(f"{what}: expected a non-empty list of token-id lists")
        v = self.dims.vocab_size
        for i, s in enumerate(seqs):
            if len(s) == 0:
                raise ValueError(f"{what}: prompt {i} is empty; every prompt needs at least one token (e.g. BOS)")
            bad = [t for t in s if not isinstance(t, int) or not 0 <= t < v]
            if bad:
                raise ValueError(f"{what}: prompt {i} has token ids outside [0, {v}): {bad[:5]}")

    def _check_blocks(self, new: list[int], live: list[tuple[int, int]], what: str) -> None:
        """Raise ValueError unless the KV pool can give ``new`` sequences (their token counts) and the
        ``live`` (slot, tokens) their blocks at once (always fine when the cache is static)."""
        kv = self.cache.kv
        need = sum(kv.blocks_new(n) for n in new) + sum(kv.blocks_short(s, n) for s, n in live)
        if need > kv.free_blocks:
            raise ValueError(
                f"{what}: the KV block pool is full: {need} blocks of {kv.block_size} tokens needed, {kv.free_blocks} of "
                f"{kv.capacity_blocks} free; release finished sequences (Engine.release), or load with more free memory "
                "(a lower kv_pool_headroom_pct) or a smaller max_batch"
            )

    def _check_room(self, lengths: list[int], what: str) -> None:
        for i, n in enumerate(lengths):
            if n > self.max_seq_len:
                raise ValueError(
                    f"{what}: sequence {i} would hold {n} tokens, more than max_seq_len={self.max_seq_len}; "
                    "shorten it or load the engine with a larger max_seq_len"
                )

    # ---- parity surface -----------------------------------------------------------------
    def prefill(self, prompts: list[list[int]], slots: list[int] | None = None, *, return_hidden: bool = False) -> PrefillResult:
        """Run prompt tokens through the model, new sequences or continuing ones.

        Args:
            prompts: token ids per sequence (each non-empty, ids in [0, V)).
            slots: None to start new sequences in fresh slots; else the slots of live
                sequences to continue (chunked prefill), one per prompt.
            return_hidden: also return per-layer hidden states and token-mixer outputs (parity).
        Returns:
            ``PrefillResult``.
        Raises:
            ValueError: empty prompt or bad token ids, a sequence longer than max_seq_len,
                more new sequences than free slots, more KV blocks than the pool has free, an
                unknown/released/repeated slot, or ``len(slots) != len(prompts)``. Nothing is
                changed when it raises.
        """
        self._check_tokens(prompts, "prefill")
        if slots is None:
            self._check_room([len(p) for p in prompts], "prefill")
            if len(prompts) > self.cache.free_slots:
                raise ValueError(
                    f"prefill: {len(prompts)} new sequences but only {self.cache.free_slots} of {self.max_batch} slots are free; "
                    "release finished sequences (Engine.release) or load with a larger max_batch"
                )
            self._check_blocks([len(p) for p in prompts], [], "prefill")
            slots = self.cache.allocate(len(prompts))
        else:
            slots = list(slots)
            if len(slots) != len(prompts):
                raise ValueError(f"prefill: {len(prompts)} prompts but {len(slots)} slots; give one slot per prompt")
            self.cache.check_live(slots)
            self._check_room([self.cache.lengths[s] + len(p) for s, p in zip(slots, prompts)], "prefill")
            self._check_blocks([], [(s, self.cache.lengths[s] + len(p)) for s, p in zip(slots, prompts)], "prefill")
        out = self._run(prompts, slots, decode=False, last_only=False, return_hidden=return_hidden)
        cu = [0]
        for p in prompts:
            cu.append(cu[-1] + len(p))
        logits = [out.logits[cu[i] : cu[i + 1]] for i in range(len(prompts))]
        if not return_hidden:
            return PrefillResult(slots, logits)
        hidden = [out.hidden[:, cu[i] : cu[i + 1]] for i in range(len(prompts))]
        mixer = [out.mixer[:, cu[i] : cu[i + 1]] for i in range(len(prompts))]
        return PrefillResult(slots, logits, hidden, mixer)

    def decode(self, slots: list[int], tokens: list[int]) -> torch.Tensor:
        """Feed one token to each live sequence; returns fp32 logits [B, V] (row i for ``slots[i]``).

        Raises:
            ValueError: unknown/released/repeated slot, ``len(tokens) != len(slots)``, a bad
                token id, a sequence already at max_seq_len, or no free KV block for a sequence
                that needs a new one. Nothing is changed when it raises.
        """
        slots = list(slots)
        if not slots or len(tokens) != len(slots):
            raise ValueError(f"decode: need one token per slot, got {len(tokens)} tokens for {len(slots)} slots")
        self.cache.check_live(slots)
        self._check_tokens([[t] for t in tokens], "decode")
        self._check_room([self.cache.lengths[s] + 1 for s in slots], "decode")
        self._check_blocks([], [(s, self.cache.lengths[s] + 1) for s in slots], "decode")
        return self._run([[t] for t in tokens], slots, decode=True, last_only=True, return_hidden=False).logits

    def release(self, slots: list[int]) -> None:
        """Free the slots of finished sequences for reuse.

        Raises:
            ValueError: a slot that is not live or repeats.
        """
        self.cache.release(list(slots))

    def warmup(self, max_seqs: int | None = None, max_tokens: int | None = None) -> WarmupReport:
        """Compile every batch-shape class a scheduler step can produce before serving (``warmup.warm_up``).

        Raises:
            ValueError: a slot is live.
        """
        return warm_up(self, max_seqs, max_tokens)

    def _run(self, seqs: list[list[int]], slots: list[int], *, decode: bool, last_only: bool, return_hidden: bool):
        starts = [self.cache.lengths[s] for s in slots]
        self.cache.reserve([(s, st + len(q)) for s, st, q in zip(slots, starts, seqs)])  # KV blocks, before the forward
        if decode and self.graphs is not None and self.graphs.covers(len(slots)):
            logits = self.graphs.run([s[0] for s in seqs], starts, slots)
            for s in slots:
                self.cache.lengths[s] += 1
            return ForwardOut(logits, None)
        batch = make_batch(seqs, slots, starts, self.device, decode=decode)
        rows = torch.tensor(batch.last_rows, device=self.device) if last_only and not decode else None
        out = self.model.forward(batch, self.cache, rows=rows, return_hidden=return_hidden)
        for s, n in zip(slots, batch.lens):
            self.cache.lengths[s] += n
        return out

    # ---- generation ---------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], params: SamplingParams | list[SamplingParams]) -> list[list[int]]:
        """Generate for many prompts at once; returns the output token ids per prompt (prompt excluded).

        A thin loop over ``scheduler.Scheduler.step`` (continuous batching). A sequence stops
        after ``max_tokens`` tokens, or at the end-of-sequence token or one of
        ``params.stop_token_ids`` (kept as its last output token; EOS not with ``ignore_eos``).
        Its output does not depend on the other prompts (greedy exactly up to kernel rounding;
        sampling through its own generator).

        Raises:
            ValueError: bad prompts (see ``prefill``), a params list of the wrong length, or a
                prompt whose length + max_tokens - 1 exceeds max_seq_len. Checked before any work.
        """
        self._check_tokens(prompts, "generate")
        plist = list(params) if isinstance(params, (list, tuple)) else [params] * len(prompts)
        if len(plist) != len(prompts):
            raise ValueError(f"generate: {len(prompts)} prompts but {len(plist)} SamplingParams; give one, or one per prompt")
        self._check_room([len(p) + sp.max_tokens - 1 for p, sp in zip(prompts, plist)], "generate")
        sched = Scheduler(self)
        for i, (p, sp) in enumerate(zip(prompts, plist)):
            sched.add_request(i, list(p), sp)
        results: list[list[int]] = [[] for _ in prompts]
        try:
            while sched.has_unfinished():
                for out in sched.step():
                    results[out.request_id] += out.new_tokens
        finally:  # an interrupted call leaves no slot behind
            sched.abort_all()
        return results
