"""How visible is the mutant ``rope_slow_pairs_dropped`` in one full-size attention layer of the synthetic checkpoint?

    python scripts/rope_dilution.py T SEEDS [LAYER]      # e.g. 2048 0 3  (CPU, fp32, about 10 min at T = 2048)

Builds layer LAYER's weights of qwen3.6-35b-a3b from ``metainfer.checkpoint.init`` (the synthetic checkpoint's own
initialisation; no checkpoint file needed) and runs on random inputs [T, H]:
1. the attention block (q/gate, q/k norm, partial RoPE, GQA causal attention, sigmoid gate, o_proj), honest and
   mutated, and honest with q/k/v rounded to bf16: the block's relative output error over positions >= 0, T/4, T/2, 3T/4;
2. for the first seed, the layer's MoE (router top-k, the routed experts, the gated shared expert) on top: the RMS of
   the attention and MoE outputs and the relative error of the whole layer update ``attn + moe``, which is what the
   layer-local parity check compares (docs/results/h200-2026-12-04-b, "The rope mutant on the twin").
"""
import sys

import torch
from metainfer.targets import get_model
from metainfer.checkpoint.layout import model_params
from metainfer.checkpoint.init import init_dense
torch.manual_seed(0)
T = int(sys.argv[1]); seeds = [int(s) for s in sys.argv[2].split(",")]; layer = int(sys.argv[3]) if len(sys.argv) > 3 else 3
t = get_model("qwen3.6-35b-a3b").text
hd, nq, nkv, H = t["head_dim"], t["num_attention_heads"], t["num_key_value_heads"], t["hidden_size"]
rd = int(hd * t.get("partial_rotary_factor", 0.25)); theta = t.get("rope_theta") or t["rope_parameters"]["rope_theta"]
print("hd", hd, "nq", nq, "nkv", nkv, "rotary", rd, "theta", theta)
ps = {p.name: p for p in model_params(t, mtp=False)}
def W(seed, suffix):
    p = ps[f"layers.{layer}.{suffix}"]; return init_dense(p.name, p.shape, p.kind, seed, p.num_layers).to(torch.bfloat16).float()
def rms(x, w, eps=1e-6): return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1 + w)
def rope(x, pos, mut):
    inv = 1.0 / (theta ** (torch.arange(0, rd, 2).float() / rd))
    f = pos.float()[:, None] * inv[None]
    if mut: f = f * (torch.arange(f.shape[1]) < f.shape[1] // 2)
    emb = torch.cat([f, f], -1); c, s = emb.cos()[:, None], emb.sin()[:, None]
    xr, xp = x[..., :rd], x[..., rd:]
    x1, x2 = xr[..., : rd // 2], xr[..., rd // 2 :]
    return torch.cat([xr * c + torch.cat([-x2, x1], -1) * s, xp], -1)
def attn(seed, x, mut, dt=torch.float32):
    q_g = (x @ W(seed, "self_attn.q_proj.weight").T).view(T, nq, 2 * hd)
    q, gate = q_g[..., :hd], q_g[..., hd:]
    k = (x @ W(seed, "self_attn.k_proj.weight").T).view(T, nkv, hd)
    v = (x @ W(seed, "self_attn.v_proj.weight").T).view(T, nkv, hd)
    q = rms(q, W(seed, "self_attn.q_norm.weight")); k = rms(k, W(seed, "self_attn.k_norm.weight"))
    pos = torch.arange(T)
    q, k = rope(q, pos, mut).to(dt), rope(k, pos, mut).to(dt)
    k = k.repeat_interleave(nq // nkv, 1); v = v.to(dt).repeat_interleave(nq // nkv, 1)
    o = torch.nn.functional.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True, scale=hd**-0.5)
    o = o.transpose(0, 1).float() * torch.sigmoid(gate)
    return o.reshape(T, nq * hd) @ W(seed, "self_attn.o_proj.weight").T
for seed in seeds:
    x = rms(torch.randn(T, H), W(seed, "input_layernorm.weight"))
    ref = attn(seed, x, False); mut = attn(seed, x, True); b16 = attn(seed, x, False, torch.bfloat16)
    def err(a, b, lo): return float((a[lo:] - b[lo:]).norm() / b[lo:].norm())
    for lo in (0, T // 4, T // 2, 3 * T // 4):
        print(f"seed {seed} positions >= {lo}: mutant {err(mut, ref, lo):.4f}  bf16 qkv {err(b16, ref, lo):.4f}")
# ---- the MoE part of the same layer, on h = x_in + attn (post_attention_layernorm), to see the dilution
from metainfer.checkpoint.init import init_expert
seed = seeds[0]
x_in = torch.randn(T, H)
xn = rms(x_in, W(seed, "input_layernorm.weight"))
a_ref, a_mut = attn(seed, xn, False), attn(seed, xn, True)
def moe(h):
    hn = rms(h, W(seed, "post_attention_layernorm.weight"))
    logits = hn @ W(seed, "mlp.gate.weight").T
    p = logits.softmax(-1); w, ids = p.topk(t["num_experts_per_tok"], -1); w = w / w.sum(-1, keepdim=True)
    out = torch.zeros_like(h); I = t["moe_intermediate_size"]; L = t["num_hidden_layers"]
    for e in ids.unique().tolist():
        tok, j = torch.where(ids == e)
        g = init_expert(f"layers.{layer}.mlp.experts", e, "gate_proj", (I, H), seed, L).bfloat16().float()
        u = init_expert(f"layers.{layer}.mlp.experts", e, "up_proj", (I, H), seed, L).bfloat16().float()
        d = init_expert(f"layers.{layer}.mlp.experts", e, "down_proj", (H, I), seed, L).bfloat16().float()
        hh = torch.nn.functional.silu(hn[tok] @ g.T) * (hn[tok] @ u.T)
        out.index_add_(0, tok, (hh @ d.T) * w[tok, j, None])
    sg = W(seed, "mlp.shared_expert.gate_proj.weight"); su = W(seed, "mlp.shared_expert.up_proj.weight"); sd = W(seed, "mlp.shared_expert.down_proj.weight")
    sh = (torch.nn.functional.silu(hn @ sg.T) * (hn @ su.T)) @ sd.T
    return out + torch.sigmoid(hn @ W(seed, "mlp.shared_expert_gate.weight").T) * sh
m_ref = moe(x_in + a_ref); m_mut = moe(x_in + a_mut)
u_ref, u_mut = a_ref + m_ref, a_mut + m_mut
print("rms attn", float(a_ref.pow(2).mean().sqrt()), "rms moe", float(m_ref.pow(2).mean().sqrt()))
for lo in (0, T // 2):
    print(f"layer update error positions >= {lo}: {float((u_mut[lo:]-u_ref[lo:]).norm()/u_ref[lo:].norm()):.4f}")
