"""The mutant catalogue: one single-op mutant per op and convention of the qwen3_5_moe engine.

Each mutant is a list of exact-string edits of the rendered engine (paths relative to the
target folder, e.g. ``engine/attention.py``). An edit names how many times its old string
must occur (1 unless stated); a different count is template drift and fails the mutant loudly
(``MutantDriftError``), it never becomes a silent no-op. ``path`` says which code the mutant
reaches: ``shared`` (layer or loader code that every device runs), or ``reference+triton``
(the convention is implemented twice, as a torch reference for CPU and a Triton kernel for
CUDA, and both are patched). ``quant`` limits a mutant to targets of that weight format.
The prefill ops of ``engine/ops/`` are patched where the convention lives there (attention gate and
window, GDN gates); the fused GDN prefill kernel is not patched for the delta rule, the state precision
or the k L2 norm: on a GPU those three mutants act through the decode kernels (and on a CPU through
the shared references, which the prefill op's reference calls).
"""

from __future__ import annotations

from dataclasses import dataclass

from metainfer.errors import MetainferError


class MutantDriftError(MetainferError):
    """A mutant's old string is not in the engine source the expected number of times."""


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` by ``new`` in ``path`` (relative to the target folder); ``old`` must occur ``count`` times."""

    path: str
    old: str
    new: str
    count: int = 1


@dataclass(frozen=True)
class Mutant:
    """One single-op mutant.

    Attributes:
        name: unique id (``--only NAME``).
        breaks: what it breaks, in words.
        path: ``shared`` or ``reference+triton`` (module docstring).
        edits: the source patch.
        quant: ``nvfp4`` / ``bf16`` for format-specific mutants, None for any target.
        min_tokens, min_steps: the shortest longest-prompt and decode run in which the mutant's effect
            can exceed bf16 noise at all (measured, docs/PARITY.md "Mutation suite"); a run with shorter
            prompts or fewer decode steps scores it ``n/a`` rather than pretending to judge it.
    """

    name: str
    breaks: str
    path: str
    edits: tuple[Edit, ...]
    quant: str | None = None
    min_tokens: int = 0
    min_steps: int = 0


REF = "engine/kernels/reference.py"
REF_PRE = "engine/kernels/reference_prefill.py"
W = "engine/weights.py"
ATT = "engine/attention.py"
MODEL = "engine/model.py"
GDN = "engine/gdn.py"
MOE = "engine/moe.py"
K = "engine/kernels/"
OPS_ATT = "engine/ops/attention_prefill.py"
OPS_GDN = "engine/ops/gdn_chunk.py"


def _loader_zero(name: str, breaks: str, old: str) -> Mutant:
    """A norm weight loaded as zeros: the zero-centred ``1 + w`` becomes 1 (the weight ignored)."""
    return Mutant(name, breaks, "shared", (Edit(W, old, old.replace(".to(**bf16)", ".to(**bf16) * 0")),))


MUTANTS: tuple[Mutant, ...] = (
    # ---- norms -------------------------------------------------------------------------------
    _loader_zero("input_norm_weight", "input RMSNorm ignores its weight (1 + w -> 1)",
                 'input_norm=reader.get(f"{pre}input_layernorm.weight").to(**bf16)'),
    _loader_zero("post_norm_weight", "post-attention RMSNorm ignores its weight",
                 'post_norm=reader.get(f"{pre}post_attention_layernorm.weight").to(**bf16)'),
    _loader_zero("q_norm_weight", "attention q_norm ignores its weight",
                 'q_norm=reader.get(f"{a}q_norm.weight").to(**bf16)'),
    _loader_zero("k_norm_weight", "attention k_norm ignores its weight",
                 'k_norm=reader.get(f"{a}k_norm.weight").to(**bf16)'),
    _loader_zero("final_norm_weight", "final RMSNorm before lm_head ignores its weight",
                 'norm=reader.get("norm.weight").to(**bf16)'),
    Mutant("qk_norm_swapped", "q normalised with k_norm's weight and k with q_norm's", "shared", (
        Edit(W, 'q_norm=reader.get(f"{a}q_norm.weight")', 'q_norm=reader.get(f"{a}k_norm.weight")'),
        Edit(W, 'k_norm=reader.get(f"{a}k_norm.weight")', 'k_norm=reader.get(f"{a}q_norm.weight")'),
    )),
    Mutant("q_norm_skipped", "q not RMS-normalised (only scaled by 1 + w)", "reference+triton", (
        Edit(REF, "y = rmsnorm_ref(x.reshape(-1, hd), w, eps)[0].reshape(x.shape)",
             "y = (x.float() * (1.0 + w.float())).to(x.dtype) if w is q_w else rmsnorm_ref(x.reshape(-1, hd), w, eps)[0].reshape(x.shape)"),
        Edit(K + "rope.py", "rstd = tl.rsqrt(tl.sum(b_x * b_x, axis=0) / HD + eps)",
             "rstd = tl.rsqrt(tl.sum(b_x * b_x, axis=0) / HD + eps)\n        rstd = tl.where(i_h < NQ, 1.0, rstd)"),
    )),
    Mutant("gdn_norm_weight", "GDN gated output norm ignores its (plain) weight (w -> 1)", "shared", (
        Edit(W, 'norm=reader.get(f"{a}norm.weight").to(**bf16)', 'norm=reader.get(f"{a}norm.weight").to(**bf16) * 0 + 1'),
    )),
    Mutant("norm_zero_centred", "RMSNorm multiplies by w instead of the zero-centred 1 + w", "reference+triton", (
        Edit(REF, "y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w.float())",
             "y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()"),
        Edit(K + "norm.py", "b_y = b_x * b_rstd * (1.0 + b_w)", "b_y = b_x * b_rstd * b_w"),
        Edit(K + "rope.py", "return round_bf16(b_x * rstd * (1.0 + b_w))", "return round_bf16(b_x * rstd * b_w)"),
    )),
    Mutant("gdn_norm_gate", "GDN output gate sigmoid(z) instead of silu(z)", "reference+triton", (
        Edit(REF, "return ((w * n).float() * F.silu(z.float())).to(dtype)", "return ((w * n).float() * torch.sigmoid(z.float())).to(dtype)"),
        Edit(K + "norm.py", "b_y = b_nw * (b_z * tl.sigmoid(b_z))", "b_y = b_nw * tl.sigmoid(b_z)"),
    )),
    # ---- full attention ----------------------------------------------------------------------
    Mutant("attn_gate_constant", "attention output gate sigmoid(gate) replaced by the constant 0.5", "shared", (
        Edit(ATT, "o = (o * torch.sigmoid(gate)).reshape(t, nq * hd)", "o = (o * 0.5).reshape(t, nq * hd)"),
        Edit(ATT, "o = _decode_attention_splitk(q, kc, vc, batch, scale, decode_splits, gate, table)",
             "o = _decode_attention_splitk(q, kc, vc, batch, scale, decode_splits, torch.zeros_like(gate), table)"),
        Edit(OPS_ATT, "return o * torch.sigmoid(gate)", "return o * 0.5"),
        Edit(OPS_ATT, "out = round_bf16(out * round_bf16(tl.sigmoid(b_g.to(tl.float32))))", "out = round_bf16(out * 0.5)"),
    )),
    # a cut of a few per cent in the token mixer: at full size the layer's MoE writes about 10x more into the
    # residual stream than its attention (docs/results/h200-2026-12-04-b), so only the mixer's own output shows it
    Mutant("attn_out_scaled", "full attention's output 3 % low (a few-per-cent cut in the token mixer)", "shared", (
        Edit(MODEL, "mix = attention_forward(", "mix = 0.97 * attention_forward("),
    )),
    Mutant("rope_fast_pairs_dropped", "RoPE skips the faster half of the rotary pairs", "shared", (
        Edit(ATT, "emb = torch.cat([freqs, freqs], dim=-1)",
             "freqs = freqs * (torch.arange(freqs.shape[1], device=freqs.device) >= freqs.shape[1] // 2)\n"
             "        emb = torch.cat([freqs, freqs], dim=-1)"),
    )),
    # the slow pairs turn by position * theta^-1/2 = position * 3.2e-4 rad at theta 1e7: under 0.25 rad
    # below 700 tokens, so only long prompts can tell
    Mutant("rope_slow_pairs_dropped", "RoPE rotates only the faster half of the rotary pairs", "shared", (
        Edit(ATT, "emb = torch.cat([freqs, freqs], dim=-1)",
             "freqs = freqs * (torch.arange(freqs.shape[1], device=freqs.device) < freqs.shape[1] // 2)\n"
             "        emb = torch.cat([freqs, freqs], dim=-1)"),
    ), min_tokens=300),  # tiny twin (theta 1e4): turns by radians in 300 tokens; full size (1e7): the GPU set's 2,048+
    Mutant("rope_theta", "RoPE theta 10x the config's", "shared", (
        Edit(ATT, "self.inv_freq = 1.0 / (dims.rope_theta ** (", "self.inv_freq = 1.0 / ((10 * dims.rope_theta) ** ("),
    )),
    Mutant("attn_scale", "attention scale (2 head_dim)^-0.5 instead of head_dim^-0.5", "shared", (
        Edit(ATT, "scale = hd**-0.5", "scale = (2 * hd) ** -0.5"),
    )),
    # ---- Gated DeltaNet ----------------------------------------------------------------------
    Mutant("gdn_decay_dt_bias", "GDN decay g computed without dt_bias", "reference+triton", (
        Edit(GDN, "g = -w.A_log.exp() * F.softplus(a.float() + w.dt_bias)", "g = -w.A_log.exp() * F.softplus(a.float())"),
        Edit(REF, "g = -A_log.float().exp() * F.softplus(a.float() + dt_bias.float())", "g = -A_log.float().exp() * F.softplus(a.float())"),
        Edit(K + "gdn.py", "b_a = b_g + tl.load(dtb_ptr + i_h).to(tl.float32)", "b_a = b_g"),
        Edit(OPS_GDN, "g = -A_log.float().exp() * F.softplus(a.float() + dt_bias.float())", "g = -A_log.float().exp() * F.softplus(a.float())"),
        Edit(OPS_GDN, "_softplus(b_a + b_dtb)", "_softplus(b_a)"),
    )),
    Mutant("gdn_decay_exp", "GDN decay uses exp(a + dt_bias) where softplus(a + dt_bias) belongs", "reference+triton", (
        Edit(GDN, "g = -w.A_log.exp() * F.softplus(a.float() + w.dt_bias)", "g = -w.A_log.exp() * torch.exp(a.float() + w.dt_bias)"),
        Edit(REF, "g = -A_log.float().exp() * F.softplus(a.float() + dt_bias.float())",
             "g = -A_log.float().exp() * torch.exp(a.float() + dt_bias.float())"),
        Edit(K + "gdn.py", "b_g = -tl.exp(tl.load(alog_ptr + i_h).to(tl.float32)) * _softplus(b_a)",
             "b_g = -tl.exp(tl.load(alog_ptr + i_h).to(tl.float32)) * tl.exp(b_a)"),
        Edit(OPS_GDN, "g = -A_log.float().exp() * F.softplus(a.float() + dt_bias.float())",
             "g = -A_log.float().exp() * torch.exp(a.float() + dt_bias.float())"),
        Edit(OPS_GDN, "_softplus(b_a + b_dtb)", "tl.exp(b_a + b_dtb)"),
    )),
    Mutant("gdn_decay_a_log", "GDN decay uses A_log where -exp(A_log) belongs (A = -A_log)", "reference+triton", (
        Edit(GDN, "g = -w.A_log.exp() * F.softplus(", "g = -w.A_log * F.softplus("),
        Edit(REF, "g = -A_log.float().exp() * F.softplus(", "g = -A_log.float() * F.softplus("),
        Edit(K + "gdn.py", "b_g = -tl.exp(tl.load(alog_ptr + i_h).to(tl.float32)) * _softplus(b_a)",
             "b_g = -tl.load(alog_ptr + i_h).to(tl.float32) * _softplus(b_a)"),
        Edit(OPS_GDN, "g = -A_log.float().exp() * F.softplus(", "g = -A_log.float() * F.softplus("),
        Edit(OPS_GDN, "-tl.exp(b_alog) * _softplus(", "-b_alog * _softplus("),
    )),
    Mutant("gdn_out_scaled", "Gated DeltaNet's output 3 % low (a few-per-cent cut in the token mixer)", "shared", (
        Edit(MODEL, "mix = gdn_forward(", "mix = 0.97 * gdn_forward("),
    )),
    Mutant("gdn_beta_constant", "GDN beta = sigmoid(b) replaced by the constant 0.5", "reference+triton", (
        Edit(GDN, "beta = torch.sigmoid(b.float())", "beta = torch.sigmoid(0 * b.float())"),
        Edit(REF, "beta = torch.sigmoid(b.float())", "beta = torch.sigmoid(0 * b.float())"),
        Edit(K + "gdn.py", "b_beta = tl.sigmoid(b_beta)", "b_beta = tl.sigmoid(b_beta * 0.0)"),
        Edit(OPS_GDN, "beta = torch.sigmoid(b.float())", "beta = torch.sigmoid(0 * b.float())"),
        Edit(OPS_GDN, "tl.where(m_r, tl.sigmoid(b_b), 0.0)", "tl.where(m_r, tl.sigmoid(b_b * 0.0), 0.0)"),
    )),
    Mutant("gdn_delta_rule", "GDN state update drops the delta-rule correction (delta = beta v)", "reference+triton", (
        Edit(REF, "delta = (v.float() - kv) * beta.float().unsqueeze(-1)", "delta = v.float() * beta.float().unsqueeze(-1)"),
        Edit(REF_PRE, "v_new = new_v[:, c] - k_cum[:, c] @ s", "v_new = new_v[:, c]"),
        Edit(K + "gdn.py", "b_d = (b_v - tl.sum(b_s * b_k[:, None], axis=0)) * b_beta", "b_d = b_v * b_beta"),
        Edit(K + "prefill.py", "b_d = (b_v - tl.sum(b_s * b_k[:, None], axis=0)) * b_beta", "b_d = b_v * b_beta"),
    )),
    Mutant("gdn_state_bf16", "GDN recurrent state rounded to bf16 after every update", "reference+triton", (
        Edit(REF, "s = s + kf.unsqueeze(-1) * delta.unsqueeze(-2)", "s = (s + kf.unsqueeze(-1) * delta.unsqueeze(-2)).bfloat16().float()"),
        Edit(REF_PRE, "s = s * cum[:, c, -1].exp()[:, None, None] + k_dec[:, c].transpose(-1, -2) @ v_new",
             "s = (s * cum[:, c, -1].exp()[:, None, None] + k_dec[:, c].transpose(-1, -2) @ v_new).bfloat16().float()"),
        Edit(K + "gdn.py", "b_s = b_s + b_k[:, None] * b_d[None, :]", "b_s = (b_s + b_k[:, None] * b_d[None, :]).to(tl.bfloat16).to(tl.float32)"),
        Edit(K + "prefill.py", "b_s = b_s + b_k[:, None] * b_d[None, :]", "b_s = (b_s + b_k[:, None] * b_d[None, :]).to(tl.bfloat16).to(tl.float32)"),
    )),  # decode consistency: 0.018-0.030 against 0.0125 in 16 steps on the tiny CPU target (docs/PARITY.md)
    Mutant("gdn_qk_l2norm", "GDN k not L2-normalised", "reference+triton", (
        Edit(REF, "kf = _l2norm(k.float()).repeat_interleave(r, dim=1)", "kf = k.float().repeat_interleave(r, dim=1)"),
        Edit(REF_PRE, "kf = _l2norm(k.float()).repeat_interleave(r, dim=1)", "kf = k.float().repeat_interleave(r, dim=1)"),
        Edit(K + "gdn.py", "b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k, axis=0) + 1e-6)", "b_k = b_k"),
        Edit(K + "prefill.py", "b_k = b_k * tl.rsqrt(tl.sum(b_k * b_k, axis=0) + 1e-6)", "b_k = b_k"),
    )),
    Mutant("gdn_conv_taps", "GDN causal conv1d taps in reverse order", "shared", (
        Edit(W, ".reshape(dims.conv_dim, dims.linear_conv_kernel_dim).to(**bf16)",
             ".reshape(dims.conv_dim, dims.linear_conv_kernel_dim).flip(-1).to(**bf16)"),
    )),
    # ---- MoE ---------------------------------------------------------------------------------
    Mutant("route_topk", "router keeps top-(k-1) experts", "shared", (
        Edit(MOE, "kernels.route_topk(logits, dims.num_experts_per_tok, w.shared_stacked)",
             "kernels.route_topk(logits, dims.num_experts_per_tok - 1, w.shared_stacked)"),
    )),
    Mutant("route_renorm", "top-k routing weights not renormalised to sum 1", "reference+triton", (
        Edit(REF, "weights = weights / weights.sum(-1, keepdim=True)", "weights = weights"),
        Edit(K + "route.py", "b_top = b_top / tl.sum(b_top, axis=0)", "b_top = b_top"),
    )),
    Mutant("route_sigmoid", "router scores by sigmoid instead of softmax (then renormalised)", "reference+triton", (
        Edit(REF, "probs = torch.softmax(logits[:, :n_exp].float(), dim=-1)", "probs = torch.sigmoid(logits[:, :n_exp].float())"),
        Edit(K + "route.py", "b_p = tl.exp(b_l - tl.max(b_l, axis=0))", "b_p = tl.sigmoid(b_l)"),
        Edit(K + "route.py", "b_p = b_p / tl.sum(b_p, axis=0)", "b_p = b_p"),
    )),
    Mutant("shared_expert_dropped", "shared expert left out of the MoE output", "reference+triton", (
        Edit(REF, "gate = torch.sigmoid(logits[:, n_exp:].float()).to(torch.bfloat16).float()",
             "gate = 0 * torch.sigmoid(logits[:, n_exp:].float()).to(torch.bfloat16).float()"),
        Edit(K + "route.py", "round_bf16(tl.sigmoid(b_s))", "0.0 * round_bf16(tl.sigmoid(b_s))"),
        Edit(MOE, "return routed + shared", "return routed"),
    )),
    Mutant("shared_gate_constant", "shared-expert gate sigmoid(x w) replaced by the constant 0.5", "reference+triton", (
        Edit(REF, "gate = torch.sigmoid(logits[:, n_exp:].float())", "gate = torch.sigmoid(0 * logits[:, n_exp:].float())"),
        Edit(K + "route.py", "round_bf16(tl.sigmoid(b_s))", "round_bf16(tl.sigmoid(b_s * 0.0))"),
        Edit(MOE, "torch.sigmoid(F.linear(x, w.shared_expert_gate))", "torch.sigmoid(0 * F.linear(x, w.shared_expert_gate))"),
    )),
    # ---- NVFP4 conventions (loader: every kernel reads what it stores) -----------------------
    Mutant("nvfp4_nibble_order", "E2M1 codes read high nibble first", "shared", (
        Edit(W, "w2 = torch.stack([d.weight for d in downs])  # [E, H, I/2]",
             "w2 = torch.stack([d.weight for d in downs])  # [E, H, I/2]\n"
             "    w13, w2 = (w13 >> 4) | (w13 << 4), (w2 >> 4) | (w2 << 4)"),
    ), quant="nvfp4"),
    Mutant("nvfp4_block_scale_shift", "each 16-block scaled by its neighbour's block scale", "shared", (
        Edit(W, "s2 = torch.stack([d.weight_scale for d in downs])  # [E, H, I/16]",
             "s2 = torch.stack([d.weight_scale for d in downs])  # [E, H, I/16]\n"
             "    s13, s2 = torch.roll(s13.view(torch.uint8), 1, -1).view(s13.dtype), torch.roll(s2.view(torch.uint8), 1, -1).view(s2.dtype)"),
    ), quant="nvfp4"),
    Mutant("nvfp4_global_divisor", "global scale (weight_scale_2) applied as a divisor", "shared", (
        Edit(W, "g13.float().to(device), s2.to(device), g2.float().to(device)",
             "(1.0 / g13.float()).to(device), s2.to(device), (1.0 / g2.float()).to(device)"),
    ), quant="nvfp4"),
    Mutant("nvfp4_down_global", "down_proj takes the gate projection's global scale", "shared", (
        Edit(W, "g2 = torch.stack([d.weight_scale_2.reshape(()) for d in downs])",
             "g2 = torch.stack([g.weight_scale_2.reshape(()) for g in gates])"),
    ), quant="nvfp4"),
)


def window_mutant(window: int) -> Mutant:
    """Full attention limited to the last ``window`` keys: the prefill op (reference mask; the Triton kernel
    skips key tiles wholly before the window), the old prefill path and the SDPA decode path. The split-K
    decode kernel still reads every key, so on a GPU the windowed prefill is what parity sees."""
    keys_q = "torch.arange(total, device=x.device)[None, :]"
    pos_q = "(start + torch.arange(n, device=x.device))[:, None]"
    keys_o, pos_o = "torch.arange(total, device=q.device)[None, :]", "(start + torch.arange(n, device=q.device))[:, None]"
    return Mutant("attn_window", f"full attention sees only the last {window} keys (a window just longer than "
                  "the longest fixed parity prompt + its decode)", "shared", (
        Edit(ATT, f"mask = {keys_q} <= {pos_q}", f"mask = ({keys_q} <= {pos_q}) & ({keys_q} > {pos_q} - {window})"),
        Edit(ATT, "gather_kv(kc, table, slot, start + 1)", f"gather_kv(kc, table, slot, start + 1)[-{window}:]"),
        Edit(ATT, "gather_kv(vc, table, slot, start + 1)", f"gather_kv(vc, table, slot, start + 1)[-{window}:]"),
        Edit(OPS_ATT, f"mask = {keys_o} <= {pos_o}", f"mask = ({keys_o} <= {pos_o}) & ({keys_o} > {pos_o} - {window})"),
        # the kernel skips whole key tiles more than `window` before the block's first query
        Edit(OPS_ATT, "for j0 in range(0, lo_full, BLOCK_N):",
             f"for j0 in range(tl.maximum(first - {window}, 0) // BLOCK_N * BLOCK_N, lo_full, BLOCK_N):"),
    ))


def catalogue(window: int) -> tuple[Mutant, ...]:
    """Every mutant, the attention-window one with ``window`` keys (see ``window_for``)."""
    return (*MUTANTS, window_mutant(window))


def window_for(lengths: tuple[int, ...], steps: int) -> int:
    """The window a cheat would tune to the fixed parity prompts: the longest fixed (not seed-drawn)
    length plus its decode steps plus one."""
    from harness.prompts import SeedDrawn

    fixed = [int(n) for n in lengths if not isinstance(n, SeedDrawn)]
    return max(fixed) + steps + 1


def by_name(name: str, window: int = 1 << 20) -> Mutant:
    """The mutant called ``name``.

    Raises:
        UnknownNameError: no such mutant (the message lists them).
    """
    from metainfer.errors import UnknownNameError

    every = catalogue(window)
    for m in every:
        if m.name == name:
            return m
    raise UnknownNameError(f"no mutant {name!r}; known: {', '.join(m.name for m in every)}")
