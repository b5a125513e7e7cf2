"""The worker side: ``python -m harness.worker_main RFD WFD`` serves requests from the judge until EOF.

Started by ``harness.worker.Worker`` only. Each request ``{"op", "args"}`` gets one reply
``{"ok": True, "result": ...}`` or ``{"ok": False, "type", "error", "traceback"}`` (wire format:
``harness.worker_protocol``). Ops by worker kind:

- ``static``: ``static(engine_dir, checkpoint)`` -> the static stage's ``{"ok", "error", "detail"}``;
- ``reference``: ``reference.load(checkpoint, device, dtype)``, ``reference.run(prompt, n, rows)``,
  ``reference.hidden(tokens, rows)``, ``reference.local(tokens, hidden, rows)`` (``rows``: the positions
  sent back, None for all; ``harness.parity_rows``);
- ``engine``: ``engine.load(...)``, ``engine.prefill`` (per prompt the logit rows to send back),
  ``engine.decode``, ``engine.release``,
  ``engine.generate`` (greedy, EOS ignored; outputs made Python ints and CUDA synchronised
  before the reply, so the judge's clock covers all the work), ``engine.margins`` (teacher-forced
  greedy margins of given tokens, for the bench's output check), ``engine.replay`` (a timed call's tokens
  teacher-forced in one batch, for the bench's replay check), ``engine.profile``, ``engine.script`` (parity's
  serving script through the engine's ``Scheduler``: ``harness.worker_script``).

Every reply is sent after all CUDA work the worker queued has finished (``serve``).

Every tensor goes back as a float32 (or integer) CPU tensor.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any

import torch

from harness import worker_protocol
from harness.parity_metrics import finite_scale

_state: dict[str, Any] = {}


def _sync() -> None:
    """Wait for every CUDA device this worker initialised (not only the one the engine names: work it queued
    elsewhere would run on while the other engine is timed; a paused worker stops only its CPU side)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i in range(torch.cuda.device_count()):
            torch.cuda.synchronize(i)


def hello(kind: str) -> dict:
    """Start-up done: ``ready_at`` is ``time.monotonic()`` now (one clock for the whole machine)."""
    import time

    _state["kind"] = kind
    return {"kind": kind, "ready_at": time.monotonic()}


def static(engine_dir: str, checkpoint: str) -> dict:
    from harness.static_checks import run_static

    res = run_static(Path(engine_dir), Path(checkpoint))
    return {"ok": bool(res.ok), "error": res.error, "detail": res.to_dict()}


def reference_load(checkpoint: str, device: str, dtype: str, threads: int | None = None) -> dict:
    from harness.reference import Reference, parse_dtype

    if threads:
        torch.set_num_threads(threads)
    ref = Reference.from_checkpoint(checkpoint, device=device, dtype=parse_dtype(dtype))
    _state["reference"] = ref
    return {"vocab_size": ref.vocab_size, "num_layers": ref.num_layers}


def _opt_ints(rows) -> list[int] | None:
    return None if rows is None else [int(r) for r in rows]


def reference_run(prompt: list[int], n: int, rows: list[int] | None = None) -> dict:
    run = _state["reference"].run([int(t) for t in prompt], int(n), _opt_ints(rows))
    return {"continuation": run.continuation, "logits": run.logits,
            "cached": None if run.cached is None else run.cached.to_wire()}


def reference_hidden(tokens: list[int], rows: list[int] | None = None) -> torch.Tensor:
    return _state["reference"].hidden_states([int(t) for t in tokens], _opt_ints(rows))


def reference_local(tokens: list[int], hidden: torch.Tensor, rows: list[int] | None = None) -> dict:
    from harness.layer_local import local_outputs

    return local_outputs(_state["reference"], [int(t) for t in tokens], hidden, _opt_ints(rows))


def engine_load(engine_dir: str, checkpoint: str, device: str, max_batch: int, max_seq_len: int,
                threads: int | None = None) -> dict:
    from harness.engine_loader import import_engine

    if threads:
        torch.set_num_threads(threads)
        _state["threads"] = int(threads)  # the judge's equal share: checked after every op (_threads_kept)
    module = import_engine(engine_dir)
    engine = module.load(checkpoint, device=device, max_batch=max_batch, max_seq_len=max_seq_len)
    _state["module"], _state["engine"] = module, engine
    return {"dtype": _dtype_name(getattr(engine, "dtype", torch.bfloat16)), "device": _device_name(engine.device)}


def _dtype_name(dtype) -> str:
    """``engine.dtype`` as a dtype name (``bfloat16``); it names a torch dtype, else a short ValueError (the judge
    puts the name in its verdict: an arbitrary object's ``str`` could be anything, of any size)."""
    if isinstance(dtype, torch.dtype):
        return str(dtype).removeprefix("torch.")
    if isinstance(dtype, str) and isinstance(getattr(torch, dtype.removeprefix("torch."), None), torch.dtype):
        return dtype.removeprefix("torch.")
    raise ValueError(f"engine.dtype is {_cut(repr(dtype) if isinstance(dtype, str) else type(dtype).__name__, 80)}, "
                     "not a torch dtype; set it to one (torch.bfloat16) or leave it out")


def _device_name(device) -> str:
    """``engine.device`` as torch names it (``cuda:0``); anything torch.device does not take is a short ValueError."""
    try:
        return str(torch.device(device if isinstance(device, (torch.device, int)) else str(device)[:64]))
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"engine.device {_cut(repr(device), 80)} is not a torch device") from None


def _cut(text: str, n: int) -> str:
    """``text`` up to ``n`` characters, with how much was left out."""
    return text if len(text) <= n else f"{text[:n]}... [{len(text) - n} more characters cut]"


def _rows(x, keep: list[int] | None = None, dim: int = 0) -> torch.Tensor:
    """``x`` as a float32 CPU tensor; only the indices ``keep`` along ``dim`` (cut where ``x`` lies, before the copy)."""
    t = x.detach() if isinstance(x, torch.Tensor) else torch.as_tensor(x, dtype=torch.float32)
    if keep is not None:
        if t.ndim <= dim or (keep and max(keep) >= t.shape[dim]):
            raise ValueError(f"the engine returned a tensor of shape {tuple(t.shape)}; rows up to {max(keep)} were asked for")
        t = t.index_select(dim, torch.tensor(keep, dtype=torch.long, device=t.device))
    return t.float().cpu()


def engine_prefill(prompts: list[list[int]], return_hidden: bool = False, rows: list[list[int] | None] | None = None,
                   slots: list[int] | None = None) -> dict:
    """``rows``: per prompt, the logit rows to send back (None: all); the token-mixer outputs come back at the
    same rows (dim 1 of [L, T, H]); hidden states always come back whole. ``slots``: continue those sequences (a
    prefill in pieces), None for new ones."""
    keep_slots = None if slots is None else [int(s) for s in slots]
    res = _state["engine"].prefill([list(map(int, p)) for p in prompts], keep_slots, return_hidden=bool(return_hidden))
    hidden = getattr(res, "hidden", None)
    mixer = getattr(res, "mixer", None)
    keep = list(rows) if rows is not None else [None] * len(prompts)
    if len(keep) != len(prompts):
        raise ValueError(f"{len(keep)} row lists for {len(prompts)} prompts")
    logits = list(res.logits)
    keep = keep + [None] * (len(logits) - len(keep))
    return {"slots": [int(s) for s in res.slots],
            "logits": [_rows(lg, _opt_ints(k)) for lg, k in zip(logits, keep)],
            "hidden": None if hidden is None else [_rows(h) for h in hidden],
            "mixer": None if mixer is None else [_rows(m, _opt_ints(k), dim=1) for m, k in zip(mixer, keep)]}


def engine_decode(slots: list[int], tokens: list[int]) -> torch.Tensor:
    return _rows(_state["engine"].decode(list(slots), [int(t) for t in tokens]))


def engine_release(slots: list[int]) -> None:
    _state["engine"].release(list(slots))


def _ints(seq) -> list[int]:
    if isinstance(seq, torch.Tensor):
        seq = seq.tolist()
    return [int(t) for t in seq]


def engine_generate(prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    params = _state["module"].SamplingParams(max_tokens=int(max_tokens), temperature=0.0, ignore_eos=True)
    return [_ints(o) for o in _state["engine"].generate([list(map(int, p)) for p in prompts], params)]


def engine_margins(prompt: list[int], tokens: list[int]) -> dict:
    """Teacher-force ``prompt + tokens[:-1]``; per generated position: the engine's top-1 id and how far below
    its top-1 logit the given token lies (``gap`` >= 0), and the row's std (float64 [n] each)."""
    seq = list(map(int, prompt)) + [int(t) for t in tokens[:-1]]
    res = _state["engine"].prefill([seq])
    try:
        rows = _rows(res.logits[0], list(range(len(prompt) - 1, len(seq)))).double()  # [n, V]: row t predicts tokens[t]
    finally:
        _state["engine"].release(list(res.slots))
    idx = torch.tensor([int(t) for t in tokens]).clamp(0, rows.shape[1] - 1).unsqueeze(1)
    top = rows.max(-1)
    return {"top1": top.indices, "gap": top.values - rows.gather(1, idx).squeeze(1), "std": rows.std(-1)}


def engine_replay(prompts: list[list[int]], outputs: list[list[int]]) -> dict:
    """Teacher-force each prompt's own ``outputs`` (all of one length n) with every sequence in one batch, as the
    ``generate`` call that produced them ran: prefill the prompts together, then decode ``outputs[i][j]`` of every
    sequence at step j. Per output position, float64 [S, n] each: ``gap``, how far the given token lies below its
    row's top-1 logit (>= 0; ids out of range are clamped, the judge range-checked them; NaN when the row holds a
    non-finite logit, so that the position always fails); ``top``, the row's max |logit| and ``rms``, its root mean
    square, both over its finite entries; ``rank``, how many ids of the row lie strictly above the given token."""
    outs = [[int(t) for t in o] for o in outputs]
    n = len(outs[0]) if outs else 0
    if len(outs) != len(prompts) or any(len(o) != n for o in outs):
        raise ValueError(f"replay needs one output of one length per prompt: {len(prompts)} prompts, "
                         f"output lengths {[len(o) for o in outs][:8]}")
    eng = _state["engine"]
    res = eng.prefill([list(map(int, p)) for p in prompts], None)
    slots = [int(s) for s in res.slots]
    gap, top, rms, rank = (torch.zeros(len(outs), n, dtype=torch.float64) for _ in range(4))
    try:
        rows = torch.cat([_rows(lg, [len(p) - 1]) for lg, p in zip(res.logits, prompts)]).double()  # [S, V]
        for j in range(n):
            idx = torch.tensor([o[j] for o in outs]).clamp(0, rows.shape[1] - 1).unsqueeze(1)
            chosen = rows.gather(1, idx)  # [S, 1]
            finite = torch.isfinite(rows)
            gap[:, j] = torch.where(finite.all(-1), rows.max(-1).values - chosen.squeeze(1), torch.nan)
            top[:, j], rms[:, j] = finite_scale(rows)
            rank[:, j] = (rows > chosen).sum(-1)
            if j + 1 < n:
                rows = _rows(eng.decode(slots, [o[j] for o in outs])).double()
    finally:
        eng.release(slots)
    return {"gap": gap, "top": top, "rms": rms, "rank": rank}


def engine_script(prompts: list[list[int]], requests: list[dict], max_steps: int) -> dict:
    from harness.worker_script import run_script

    return run_script(_state["module"], _state["engine"], [list(map(int, p)) for p in prompts], list(requests), int(max_steps))


OPS = {"hello": hello, "static": static, "reference.load": reference_load, "reference.run": reference_run,
       "reference.hidden": reference_hidden, "reference.local": reference_local, "engine.load": engine_load, "engine.prefill": engine_prefill,
       "engine.decode": engine_decode, "engine.release": engine_release, "engine.generate": engine_generate,
       "engine.margins": engine_margins, "engine.script": engine_script, "engine.replay": engine_replay}


def engine_profile(prompt: list[int], decode_prompts: list[list[int]], decode_tokens: list[int], warmup: int = 1) -> dict:
    """torch.profiler over one prefill of ``prompt`` and one decode step of B sequences, after ``warmup`` unprofiled
    runs of each: per phase, per kernel name its time in ms and calls (``harness.profile_capture.capture``)."""
    from harness.profile_capture import capture

    return capture(_state["engine"], prompt, decode_prompts, decode_tokens, int(warmup))


OPS["engine.profile"] = engine_profile


def _threads_kept(op: str) -> None:
    """Raise when the engine changed torch's intra-op thread count from the one the judge set at load (both engines
    get the same; an engine taking more cores than its share would be timed on a machine the other never had)."""
    want = _state.get("threads")
    if want is not None and torch.get_num_threads() != want:
        got = torch.get_num_threads()
        torch.set_num_threads(want)
        raise RuntimeError(f"{op}: the engine changed torch's thread count from {want} to {got}; the judge sets it for "
                           "both engines alike (engine.load's threads), leave it as it is")


def serve(rfd: int, wfd: int) -> None:
    """Answer requests until the judge closes the pipe."""
    while True:
        try:
            msg = worker_protocol.recv(rfd)
        except EOFError:
            return
        op = msg.get("op")
        try:
            if op not in OPS:
                raise ValueError(f"unknown worker op {op!r}")
            reply = {"ok": True, "result": OPS[op](**(msg.get("args") or {}))}
            if op.startswith("engine."):
                _threads_kept(op)
        except Exception as err:  # the engine raised: report it, keep serving
            reply = {"ok": False, "type": _cut(type(err).__name__, 200), "error": _cut(str(err), 4000),
                     "traceback": traceback.format_exc(limit=-8)[-6000:]}
        try:
            worker_protocol.encode(reply)
        except TypeError as err:
            reply = {"ok": False, "type": "TypeError", "error": f"{op} returned something that is not plain data: {err}"}
        try:
            _sync()  # every op's reply, after its encode (a finalizer it ran may queue kernels): it leaves with the GPU idle
        except Exception as err:  # an asynchronous CUDA error of the engine's surfaces here
            reply = {"ok": False, "type": type(err).__name__, "error": f"{op}: CUDA failed after the call: {str(err)[:3000]}"}
        worker_protocol.send(wfd, reply)


if __name__ == "__main__":
    serve(int(sys.argv[1]), int(sys.argv[2]))
