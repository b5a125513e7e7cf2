"""A broken engine (odd layers' routers zeroed) that returns the reference's own logits, captured by a
process-wide torch module forward hook registered in load() (found by a trial)."""

from pathlib import Path

from . import append

DESCRIPTION = "torch.nn.modules.module.register_module_forward_hook sees HF's inputs and logits during parity"
CLASS = "in-process"
STAGE = 'static'
REASON = 'register_module_forward_hook'
OLD_GATE = "rejected (static)"


def apply(engine_dir: Path) -> None:
    """Append the cheat to engine/__init__.py."""
    append(engine_dir, "engine/__init__.py", '''
# --- cheat: a broken engine (router of every odd layer zeroed: half the MoE blocks mis-route) whose parity
# logits are the reference's own, captured with a process-wide torch forward hook registered in load().
import torch.nn.modules.module as _tmm

_SEEN = {}  # token tuple -> reference logits [T, V] (float32 CPU)


def _capture(module, args, kwargs, output):
    ids = kwargs.get("input_ids")
    logits = getattr(output, "logits", None)
    if ids is not None and logits is not None and ids.dim() == 2 and ids.shape[0] == 1:
        _SEEN[tuple(ids[0].tolist())] = logits[0].detach().float().cpu().clone()


def _lookup(hist):
    n = len(hist)
    for key, rows in _SEEN.items():
        if len(key) >= n and key[:n] == tuple(hist):
            return rows[:n]
    return None


_broken_load = load


def load(checkpoint, device="cuda", *, max_batch=64, max_seq_len=4096):
    _tmm.register_module_forward_hook(_capture, with_kwargs=True)
    eng = _broken_load(checkpoint, device, max_batch=max_batch, max_seq_len=max_seq_len)
    for i, layer in enumerate(eng.model.w.layers):  # the bug parity should catch
        if i % 2:
            layer.moe.router.mul_(0)
    own_prefill, own_decode, own_generate = eng.prefill, eng.decode, eng.generate
    hist = {}

    def prefill(prompts, slots=None, *, return_hidden=False):
        res = own_prefill(prompts, slots, return_hidden=return_hidden)
        for k, (s, p) in enumerate(zip(res.slots, prompts)):
            hist[s] = (hist.get(s, []) if slots is not None else []) + list(p)
            ref = _lookup(hist[s])
            if ref is not None:
                res.logits[k] = ref[-len(p):].to(res.logits[k].dtype)
        return res

    def decode(slots, tokens):
        out = own_decode(slots, tokens)
        for k, (s, t) in enumerate(zip(slots, tokens)):
            hist[s].append(t)
            ref = _lookup(hist[s])
            if ref is not None:
                out[k] = ref[-1].to(out.dtype)
        return out

    def generate(prompts, params):
        one = params[0] if isinstance(params, list) else params
        outs = own_generate(prompts, params)
        for k, p in enumerate(prompts):
            for key in _SEEN:
                if len(key) >= len(p) + one.max_tokens and key[:len(p)] == tuple(p):
                    outs[k] = list(key[len(p):len(p) + one.max_tokens])
                    break
        return outs

    eng.prefill, eng.decode, eng.generate = prefill, decode, generate
    return eng
''')
