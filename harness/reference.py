"""The parity reference: HF transformers' ``Qwen3_5MoeForCausalLM`` with the checkpoint's weights.

DESIGN.md, "Numerical parity": the reference is HF's own text model, eager attention, fed the
very weights the engine reads. For an NVFP4 checkpoint it gets the dequantized experts
(``CheckpointReader.hf_state_dict``), so parity measures the engine, not the quantization.
Every sequence runs alone (batch 1, no padding, no attention mask), so the reference has no
batching effects of its own to explain away.

Greedy continuations are drafted with HF's own cache and then checked against one uncached
full forward (``Reference.run``): every logit the judge compares comes from an uncached forward,
and each continuation token is the argmax of the returned row that predicted it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

import torch

from harness.reference_cached import CachedRows, cached_rows
from metainfer.errors import CheckpointError

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def parse_dtype(name: str) -> torch.dtype:
    """``"float32"`` / ``"bfloat16"`` → torch dtype.

    Raises:
        ValueError: any other name; the message lists the accepted ones.
    """
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown reference dtype {name!r}; use one of {', '.join(DTYPES)}") from None


def _build_model(text_config: dict, dtype: torch.dtype, device: torch.device) -> torch.nn.Module:
    from transformers.models.qwen3_5_moe.configuration_qwen3_5_moe import Qwen3_5MoeTextConfig
    from transformers.models.qwen3_5_moe.modeling_qwen3_5_moe import Qwen3_5MoeForCausalLM

    cfg = Qwen3_5MoeTextConfig(**{k: v for k, v in text_config.items() if k != "model_type"})
    cfg._attn_implementation = "eager"
    with torch.device(device):
        model = Qwen3_5MoeForCausalLM._from_config(cfg, attn_implementation="eager", dtype=dtype)
    return model


def load_strict(model: torch.nn.Module, weights) -> None:
    """Copy weights into ``model``: every key consumed, none missing, every shape equal.

    Args:
        weights: a dict of HF-named tensors, or an iterable of ``(name, tensor)`` pairs (streamed:
            each is copied in as it comes, so a full-size model is never held twice).
    Raises:
        CheckpointError: naming the missing, unexpected and mis-shaped keys.
    """
    own = model.state_dict()
    seen: set[str] = set()
    extra: list[str] = []
    shapes: list[str] = []
    items = weights.items() if isinstance(weights, dict) else weights
    with torch.no_grad():
        for name, tensor in items:
            seen.add(name)
            if name not in own:
                extra.append(name)
            elif tuple(own[name].shape) != tuple(tensor.shape):
                shapes.append(f"{name} {tuple(tensor.shape)} != {tuple(own[name].shape)}")
            else:
                own[name].copy_(tensor)
    missing = sorted(set(own) - seen)
    if missing or extra or shapes:
        raise CheckpointError(
            "reference weights do not match Qwen3_5MoeForCausalLM: "
            f"missing {missing[:8]}{'...' if len(missing) > 8 else ''} ({len(missing)}), "
            f"unexpected {sorted(extra)[:8]}{'...' if len(extra) > 8 else ''} ({len(extra)}), "
            f"mis-shaped {sorted(shapes)[:8]}; check CheckpointReader.hf_state_dict against the checkpoint's text config"
        )


#: A token within this fraction of its row's largest |logit| below the row's top is a tie for the redraft of
#: ``Reference.run`` (two bf16 steps: the size of what a changed expert grouping moves a bf16 row by).
REDRAFT_TIE_REL = 2.0**-7


def near_ties(rows: torch.Tensor, tokens: list[int]) -> bool:
    """True when each token is its row's argmax or within ``REDRAFT_TIE_REL · max|row|`` of it: ``rows`` [n, V] float,
    ``tokens`` n ids (row j predicted token j)."""
    r = rows.float()
    top = r.max(-1).values
    got = r.gather(-1, torch.tensor(tokens, device=r.device).view(-1, 1)).squeeze(-1)
    return bool(((top - got) <= REDRAFT_TIE_REL * r.abs().amax(-1)).all())


def row_index(rows: list[int], length: int, device: torch.device) -> torch.Tensor:
    """``rows`` as a long index tensor on ``device``.

    Raises:
        ValueError: ``rows`` is empty, not strictly ascending, or outside [0, length).
    """
    if not rows or any(b <= a for a, b in zip(rows, rows[1:])) or rows[0] < 0 or rows[-1] >= length:
        raise ValueError(f"rows must be strictly ascending in [0, {length}); got {len(rows)} rows from {rows[:1]} to {rows[-1:]}")
    return torch.tensor([int(r) for r in rows], dtype=torch.long, device=device)


@dataclass(frozen=True)
class ReferenceRun:
    """One prompt through the reference.

    Attributes:
        prompt: the prompt's token ids (length P ≥ 1).
        continuation: the reference's greedy continuation (length n).
        logits: teacher-forced logits over ``prompt + continuation``, float32 [S + n, V], on CPU: the
            prompt rows ``rows`` (S of them, the last one P - 1), then rows P .. P + n - 1; row t predicts
            token t + 1, so the n rows from index S - 1 on predicted the continuation.
        rows: the prompt rows kept, ascending, ending at P - 1; None: all P (then S = P).
        cached: HF's own consistency on these rows (``harness.reference_cached``); None when n = 0.
    """

    prompt: list[int]
    continuation: list[int]
    logits: torch.Tensor
    rows: tuple[int, ...] | None = None
    cached: CachedRows | None = None

    @property
    def split(self) -> int:
        """S: how many of ``logits``' rows are prompt rows (the rest are the n continuation rows)."""
        return len(self.rows) if self.rows is not None else len(self.prompt)


class Reference:
    """HF ``Qwen3_5MoeForCausalLM`` on one device and dtype, in eval mode, no grad.

    Build with :meth:`from_checkpoint` (the normal path) or :meth:`from_state_dict` (tests).
    All outputs come back as float32 CPU tensors.
    """

    def __init__(self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype):
        self.model = model.eval()
        self.device = device
        self.dtype = dtype
        self.num_layers = len(model.model.layers)
        self.vocab_size = model.config.vocab_size
        #: hidden states [L + 1, T, H] (the model's dtype, CPU) of each ``run``'s checking forward, by its tokens: parity
        #: asks ``hidden_states`` of exactly prompt + continuation next, which then costs no forward of its own
        self._hidden_memo: dict[tuple[int, ...], torch.Tensor] = {}

    @classmethod
    def from_state_dict(
        cls, text_config: dict, state_dict: dict[str, torch.Tensor], *, device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.float32,
    ) -> Reference:
        """Build from a text config dict and HF-named weights (``model.layers.*``, ``lm_head.weight``).

        Raises:
            CheckpointError: keys or shapes do not match (see :func:`load_strict`).
        """
        device = torch.device(device)
        model = _build_model(text_config, dtype, device)
        load_strict(model, state_dict)
        return cls(model, device, dtype)

    @classmethod
    def from_checkpoint(
        cls, checkpoint: str | Path, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32
    ) -> Reference:
        """Build from a checkpoint folder: the weights of ``CheckpointReader(checkpoint).hf_state_dict(dtype)``,
        streamed one tensor at a time and dequantized on ``device`` (a full-size bf16 reference is
        70 GB: it is built on the GPU without a second copy in host memory).

        Raises:
            CheckpointError: the folder does not validate, or its weights do not fit the model.
        """
        from metainfer.checkpoint import CheckpointReader

        reader = CheckpointReader(Path(checkpoint))
        reader.validate()
        device = torch.device(device)
        model = _build_model(reader.text_config, dtype, device)
        load_strict(model, reader.iter_hf_tensors(dtype, device))
        return cls(model, device, dtype)

    def _ids(self, tokens: list[int]) -> torch.Tensor:
        if not tokens:
            raise ValueError("the reference needs at least one token")
        bad = [t for t in tokens if not 0 <= t < self.vocab_size]
        if bad:
            raise ValueError(f"token ids {bad[:5]} outside [0, {self.vocab_size})")
        return torch.tensor([tokens], dtype=torch.long, device=self.device)

    @torch.no_grad()
    def logits(self, tokens: list[int], rows: list[int] | None = None) -> torch.Tensor:
        """Teacher-forced logits, float32 [T, V] on CPU; row t is the distribution of token t + 1 (only the
        rows ``rows`` when given: [len(rows), V]; a full-size [T, V] is 1 MB per row)."""
        return self._forward(tokens, rows)[0]

    @torch.no_grad()
    def _forward(self, tokens: list[int], rows: list[int] | None, capture: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One uncached forward: logits float32 [T or R, V] on CPU, and with ``capture`` the residual stream [L + 1, T, H]
        in the model's dtype on CPU (``hidden_states``' layout, every position)."""
        captured: list[torch.Tensor] = []
        handles = self._hooks(lambda out: captured.append(out[0].cpu())) if capture else []
        try:
            out = self.model(input_ids=self._ids(tokens), use_cache=False).logits[0]  # [T, V] on the device
        finally:
            for h in handles:
                h.remove()
        if rows is not None:
            out = out.index_select(0, row_index(rows, len(tokens), self.device))
        if capture and len(captured) != self.num_layers + 1:
            raise RuntimeError(f"captured {len(captured)} hidden states, expected {self.num_layers + 1}")
        return out.float().cpu(), torch.stack(captured) if capture else None

    def _hooks(self, keep) -> list:
        """Forward hooks on the embedding and every decoder layer calling ``keep(output [1, T, H])``; remove them after."""
        def hook(_module, _inputs, output):
            keep(output[0] if isinstance(output, tuple) else output)

        inner = self.model.model
        return [inner.embed_tokens.register_forward_hook(hook)] + [layer.register_forward_hook(hook) for layer in inner.layers]

    @torch.no_grad()
    def hidden_states(self, tokens: list[int], rows: list[int] | None = None) -> torch.Tensor:
        """Residual stream per layer, float32 [L + 1, T, H] on CPU (only the positions ``rows``, when given:
        [L + 1, len(rows), H]).

        Index 0 is the embedding output, index l + 1 the output of decoder layer l (before the
        final norm), taken with forward hooks on the modules, the same layout as the engine's
        ``prefill(..., return_hidden=True)``.
        """
        memo = self._hidden_memo.pop(tuple(tokens), None)
        if memo is not None:  # the checking forward of ``run`` on these tokens: the same forward, already done
            return (memo if rows is None else memo[:, row_index(rows, len(tokens), torch.device("cpu"))]).float()
        captured: list[torch.Tensor] = []
        index = None if rows is None else row_index(rows, len(tokens), self.device)
        handles = self._hooks(lambda out: captured.append((out[0] if index is None else out[0].index_select(0, index)).float().cpu()))
        try:
            self.model(input_ids=self._ids(tokens), use_cache=False)
        finally:
            for h in handles:
                h.remove()
        if len(captured) != self.num_layers + 1:
            raise RuntimeError(f"captured {len(captured)} hidden states, expected {self.num_layers + 1}")
        return torch.stack(captured)

    def _cache_kwarg(self) -> str:
        """The forward's cache keyword: ``cache`` in newer transformers 5.x, ``past_key_values`` before (5.17 on the H200)."""
        params = inspect.signature(self.model.forward).parameters
        return "cache" if "cache" in params else "past_key_values"

    @torch.no_grad()
    def _greedy_cached(self, tokens: list[int], n: int, keep: list[int] | None = None) -> tuple[list[int], dict[int, torch.Tensor]]:
        """``n`` greedy tokens after ``tokens`` with HF's own KV/recurrent cache: one forward over the
        prefix, then one single-token forward per step. EOS is not special (no generation config applies).
        Also the rows the cached path computed, {position: float32 [V] on CPU}: the prefix forward's rows at
        positions ``keep`` (None: none) and each single-token step's row."""
        kw = self._cache_kwarg()
        out = self.model(input_ids=self._ids(tokens), use_cache=True)
        seen: dict[int, torch.Tensor] = {}
        if keep:
            rows = out.logits[0].index_select(0, row_index(keep, len(tokens), self.device)).float().cpu()
            seen.update(zip(keep, rows))
        picked: list[int] = []
        for step in range(n):
            picked.append(int(out.logits[0, -1].argmax()))
            if step == n - 1:
                break
            cache = out.get("cache") if out.get("cache") is not None else out.get("past_key_values")
            if cache is None:
                raise RuntimeError("the HF model returned no cache for use_cache=True; transformers' cache API changed")
            out = self.model(input_ids=self._ids(picked[-1:]), use_cache=True, **{kw: cache})
            seen[len(tokens) + step] = out.logits[0, -1].float().cpu()
        return picked, seen

    @torch.no_grad()
    def run(self, prompt: list[int], n: int, rows: list[int] | None = None) -> ReferenceRun:
        """Greedy continuation of ``n`` tokens and teacher-forced logits float32 [P + n, V] over prompt + continuation.

        The continuation is greedy *under the returned logits*: token j is ``argmax`` of row P - 1 + j
        (``torch.argmax``: the lowest id on exact ties). It is drafted with HF's cache (one prefix forward
        plus n single-token steps), then checked against one uncached full forward; from the first row whose
        argmax differs from the draft (a near tie the cached path resolved the other way) the draft is
        redone, so a run costs two full forwards plus n cached steps in the common case and at most n + 1
        rounds. Each round's first differing row is later than the last one's, unless the full forward moved an
        earlier row when later tokens changed (on the CPU a bf16 GEMM's row depends on how many tokens each expert
        gets, so a near tie there can flip back and forth): then the run stops there if every token is within
        ``REDRAFT_TIE_REL`` of its row's top (``near_ties``), and the continuation is greedy up to such ties. Rows are computed without a cache, like every other reference output. ``rows``: the prompt
        rows to return (ascending, ending at P - 1; see ``ReferenceRun``); None: all. The draft's own rows that
        saw the final tokens, against the returned ones, are ``ReferenceRun.cached`` (HF's own consistency).
        """
        if rows is not None and (not rows or rows[-1] != len(prompt) - 1):
            raise ValueError(f"prompt rows must end at the last prompt row {len(prompt) - 1}, got {list(rows[-3:])}")
        p = len(prompt)
        # the prompt rows asked for, then the continuation's; None: every row (no copy of the [T, V] logits)
        keep_rows = None if rows is None else list(rows) + list(range(p, p + n))
        tokens, cached = list(prompt), {}
        if n:  # the cached draft, and its rows: HF's own consistency (harness.reference_cached)
            draft, cached = self._greedy_cached(tokens, n, list(range(p)) if rows is None else list(rows))
            tokens += draft
        last = -1
        for _ in range(n + 1):
            logits, hidden = self._forward(tokens, keep_rows, capture=True)  # [S + n, V]; row S - 1 + j predicted token j
            s = p if keep_rows is None else len(keep_rows) - n
            picks = logits[s - 1 : s - 1 + n].argmax(-1).tolist()
            wrong = next((j for j in range(n) if picks[j] != tokens[p + j]), None)
            if wrong is None:
                break
            if wrong <= last and near_ties(logits[s - 1 : s - 1 + n], tokens[p:]):
                break  # a row before the last redraft moved when later tokens changed: only rounding does that
            last = wrong
            keep = tokens[: p + wrong] + [picks[wrong]]
            rest = n - wrong - 1
            cached = {q: r for q, r in cached.items() if q < p + wrong}  # later rows saw the redrafted token
            more, extra = self._greedy_cached(keep, rest) if rest else ([], {})
            cached.update(extra)
            tokens = keep + more
        else:
            raise RuntimeError(f"the reference's greedy continuation of a {p}-token prompt did not settle in {n + 1} rounds "
                               "(a row moved by more than a tie when later tokens changed)")
        self._hidden_memo[tuple(tokens)] = hidden
        positions = list(range(p + n)) if keep_rows is None else keep_rows
        own = cached_rows(cached, logits, positions, p) if n else None
        return ReferenceRun(list(prompt), tokens[p:], logits, None if rows is None else tuple(int(r) for r in rows), own)
