"""NVFP4 encode/decode against hand-made bytes and scales; ModelOpt and compressed-tensors conventions."""

from __future__ import annotations

import pytest
import torch

from metainfer.formats.nvfp4 import (
    E2M1_VALUES, decode_e2m1, dequantize, encode_e2m1, global_from_compressed_tensors,
    global_to_compressed_tensors, pack_codes, quantize, unpack_codes,
)


def _e4m3(x: float) -> torch.Tensor:
    return torch.tensor(x).to(torch.float8_e4m3fn)


def test_decode_every_code():
    codes = torch.arange(16, dtype=torch.uint8)
    want = torch.tensor([0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6])
    assert torch.equal(decode_e2m1(codes), want)


def test_encode_rounds_to_nearest_ties_to_even_and_saturates():
    x = torch.tensor([0.2, 0.25, 0.3, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.1, 7.0, -0.5, -2.9, -100.0, -0.1])
    want = torch.tensor([0, 0, 1, 2, 2, 4, 4, 6, 6, 7, 7, 9, 13, 15, 0], dtype=torch.uint8)
    assert torch.equal(encode_e2m1(x), want)
    assert torch.equal(encode_e2m1(E2M1_VALUES), torch.arange(8, dtype=torch.uint8))


def test_pack_low_nibble_is_even_element():
    # element 0 = code 0xF (-6) low nibble, element 1 = code 0x2 (1.0) high nibble -> byte 0x2F
    codes = torch.tensor([[0xF, 0x2, 0x1, 0xA]], dtype=torch.uint8)
    packed = pack_codes(codes)
    assert packed.tolist() == [[0x2F, 0xA1]]
    assert torch.equal(unpack_codes(packed), codes)


def test_dequantize_hand_made_bytes_and_scales():
    # one row, K = 32: two blocks with different e4m3 block scales, global multiplier 0.25
    block0 = [0x2F, 0x91] + [0x00] * 6  # elements: -6, 1, 0.5, -0.5, then zeros
    block1 = [0x73] + [0x00] * 6 + [0xE4]  # elements: 1.5, 6, zeros..., 2, -4
    weight = torch.tensor([block0 + block1], dtype=torch.uint8)
    scale = torch.stack([_e4m3(2.0), _e4m3(0.75)]).reshape(1, 2)
    out = dequantize(weight, scale, torch.tensor(0.25))
    want = torch.zeros(1, 32)
    want[0, :4] = torch.tensor([-6, 1, 0.5, -0.5]) * 2.0 * 0.25
    want[0, 16:18] = torch.tensor([1.5, 6]) * 0.75 * 0.25
    want[0, 30:32] = torch.tensor([2, -4]) * 0.75 * 0.25
    assert torch.equal(out, want)


@pytest.mark.parametrize("k", [16, 48, 80, 2048])
def test_exactly_representable_weight_round_trips_bit_exact(k):
    g = torch.Generator().manual_seed(k)
    n = 6
    codes = torch.randint(0, 16, (n, k), generator=g, dtype=torch.uint8)
    codes[:, ::16] = 7  # every block holds +6, so block_amax / 6 is the block scale itself
    block_scales = torch.tensor([448.0, 224.0, 1.0, 0.5, 12.0, 3.0])[torch.randint(0, 6, (n, k // 16), generator=g)]
    block_scales[0, 0] = 448.0  # the tensor amax sits in a block of scale 448
    global_scale = 0.01
    w = decode_e2m1(codes).reshape(n, k // 16, 16) * block_scales.unsqueeze(-1) * global_scale
    q = quantize(w.reshape(n, k))
    assert q.weight.shape == (n, k // 2) and q.weight.dtype == torch.uint8
    assert q.weight_scale.shape == (n, k // 16) and q.weight_scale.dtype == torch.float8_e4m3fn
    assert q.weight_scale_2.shape == () and q.weight_scale_2.dtype == torch.float32
    torch.testing.assert_close(q.weight_scale_2, torch.tensor(global_scale), rtol=1e-6, atol=0)
    assert torch.equal(unpack_codes(q.weight), torch.where(decode_e2m1(codes) == 0, 0, codes))  # -0 encodes as 0
    torch.testing.assert_close(dequantize(q.weight, q.weight_scale, q.weight_scale_2), w.reshape(n, k), rtol=1e-6, atol=0)


@pytest.mark.parametrize("k", [48, 80])
def test_round_trip_error_bound(k):
    w = torch.randn(33, k, generator=torch.Generator().manual_seed(0)) * 0.05
    q = quantize(w)
    back = dequantize(q.weight, q.weight_scale, q.weight_scale_2)
    assert torch.isfinite(back).all()
    block_amax = w.abs().reshape(33, k // 16, 16).amax(-1, keepdim=True)
    err = (back - w).abs().reshape(33, k // 16, 16)
    # half the widest E2M1 step (6-4) at the block's scale, plus e4m3 rounding of the scale
    assert (err <= block_amax * (1 / 6 + 0.07)).all()
    assert (back - w).norm() / w.norm() < 0.15
    assert (back != 0).float().mean() > 0.8


def test_global_amax_override_and_zero_weight():
    w = torch.randn(4, 32, generator=torch.Generator().manual_seed(1))
    q = quantize(w, global_amax=2 * float(w.abs().max()))
    torch.testing.assert_close(q.weight_scale_2, 2 * w.abs().max() / (6 * 448))
    z = quantize(torch.zeros(2, 16))
    assert torch.equal(dequantize(z.weight, z.weight_scale, z.weight_scale_2), torch.zeros(2, 16))


def test_compressed_tensors_global_is_a_divisor():
    w = torch.randn(8, 64, generator=torch.Generator().manual_seed(2))
    q = quantize(w)
    amax = w.abs().max()
    ct_global = global_to_compressed_tensors(q.weight_scale_2)
    assert ct_global.shape == (1,)
    torch.testing.assert_close(ct_global, (6 * 448 / amax).reshape(1), rtol=1e-6, atol=0)
    back_ct = decode_e2m1(unpack_codes(q.weight)).reshape(8, 4, 16) * q.weight_scale.float().unsqueeze(-1) / ct_global
    back_mo = dequantize(q.weight, q.weight_scale, global_from_compressed_tensors(ct_global))
    torch.testing.assert_close(back_mo, back_ct.reshape(8, 64), rtol=1e-6, atol=0)


def test_gate_and_up_keep_their_own_global_scales():
    g = torch.Generator().manual_seed(3)
    gate, up = torch.randn(16, 64, generator=g), 3.0 * torch.randn(16, 64, generator=g)
    qg, qu = quantize(gate), quantize(up)
    assert float(qu.weight_scale_2 / qg.weight_scale_2) > 2.0
    fused = torch.cat([dequantize(qg.weight, qg.weight_scale, qg.weight_scale_2),
                       dequantize(qu.weight, qu.weight_scale, qu.weight_scale_2)])
    assert (fused[16:] - up).norm() / up.norm() < 0.15
    wrong = dequantize(qu.weight, qu.weight_scale, qg.weight_scale_2)  # up read with gate's global: a fused-kernel bug
    assert (wrong - up).norm() / up.norm() > 0.5


@pytest.mark.parametrize("bad", [(4, 40), (4, 24), (3, 8)])
def test_k_not_multiple_of_16_is_an_error(bad):
    with pytest.raises(ValueError, match="multiple of 16"):
        quantize(torch.randn(*bad))


def test_nan_weight_is_an_error():
    w = torch.randn(2, 16)
    w[1, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        quantize(w)


def test_dequantize_rejects_mismatched_scale_shape():
    with pytest.raises(ValueError, match="weight_scale has shape"):
        dequantize(torch.zeros(2, 16, dtype=torch.uint8), torch.ones(2, 1).to(torch.float8_e4m3fn), torch.tensor(1.0))


def test_batched_dequantize_uses_each_global_scale():
    g = torch.Generator().manual_seed(4)
    qs = [quantize(torch.randn(8, 32, generator=g) * s) for s in (1.0, 5.0, 0.1)]
    batched = dequantize(torch.stack([q.weight for q in qs]), torch.stack([q.weight_scale for q in qs]),
                         torch.stack([q.weight_scale_2 for q in qs]))
    for b, q in zip(batched, qs):
        assert torch.equal(b, dequantize(q.weight, q.weight_scale, q.weight_scale_2))
