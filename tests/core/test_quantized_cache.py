"""lessons_src.quantized_cache: the tile rule, bytes equal to each format's formula, cached decoding within a stated
tolerance of the float pass, truncate, KIVI's schedule against transformers' QuantizedCache, FP8 against its "fp8"."""

from __future__ import annotations

import copy
from fractions import Fraction

import pytest
import torch

from lessons_src import MultiHeadAttention
from lessons_src.kv_cache import KVCache, kv_bytes_per_token
from lessons_src.quantized_cache import (
    FP8,
    Q4_0,
    Q8_0,
    KIVICache,
    RotatedKeysCache,
    TileQuantizedCache,
    _pack,
    _quantize_min_max,
    _unpack,
    dequantize_tiles,
    hadamard,
    quantize_tiles,
    quantized_bytes_per_token,
)

FORMATS = [Q8_0, Q4_0, FP8]


def test_bytes_per_number_are_the_formats_own() -> None:
    # llama.cpp's ggml-common.h: block_q8_0 is 32 int8 + a float16 scale = 34 bytes, block_q4_0 16 + 2 = 18 bytes;
    # DeepSeek-V3.2's FP8 cache: 128 e4m3 bytes + a float32 scale
    assert [f.bytes_per_number for f in FORMATS] == [Fraction(34, 32), Fraction(18, 32), Fraction(132, 128)]


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f.name)
@pytest.mark.parametrize(("K", "E", "Ev"), [(4, 32, 32), (2, 64, 128), (1, 128, 128)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tile_cache_nbytes_equals_the_formula(fmt, K: int, E: int, Ev: int, dtype: torch.dtype) -> None:
    cache = TileQuantizedCache(2, K, E, 10, fmt, v_head_dim=Ev, dtype=dtype)
    for T in (3, 1, 2):
        cache.update(torch.randn(2, K, T, E).to(dtype), torch.randn(2, K, T, Ev).to(dtype))
        per_token = quantized_bytes_per_token(K, E, fmt, Ev)
        assert cache.nbytes == 2 * cache.length * per_token
        assert per_token == K * (E + Ev) * fmt.bytes_per_number
    float_bytes = kv_bytes_per_token(K, E, torch.bfloat16, Ev)
    assert per_token / float_bytes == fmt.bytes_per_number / 2  # the ratio against bfloat16, exactly


def test_kivi_nbytes_equals_its_formula() -> None:
    B, K, E, R, bits = 2, 2, 16, 4, 2
    cache = KIVICache(B, K, E, 40, bits=bits, residual=R)
    for T in (6, 1, 1, 1, 1, 1, 2, 3):
        cache.update(torch.randn(B, K, T, E), torch.randn(B, K, T, E))
        n, held, blocks = cache.quantized, cache.held, cache.blocks
        codes = n * K * 2 * E * bits // 8  # keys and values
        value_scales = n * K * 2 * 2  # a float16 scale and minimum per token and head
        key_scales = blocks * K * E * 2 * 2  # a float16 scale and minimum per block, head and channel
        assert cache.nbytes == B * (codes + value_scales + key_scales + held * K * 2 * E * 4)
    assert cache.blocks == 3  # the prefill of 6, then two blocks of 4


@pytest.mark.parametrize("fmt", [Q8_0, Q4_0], ids=lambda f: f.name)
def test_each_integer_code_is_within_half_a_step_of_its_number(fmt) -> None:
    torch.manual_seed(0)
    x = torch.randn(3, 4 * fmt.tile) * torch.tensor([0.01, 1.0, 30.0, 0.1]).repeat_interleave(fmt.tile)  # tiles apart
    codes, scales = quantize_tiles(x, fmt)
    step = x.unflatten(-1, (-1, fmt.tile)).abs().amax(-1) / fmt.largest_code  # each tile's own largest over 127 or 7
    error = (dequantize_tiles(codes, scales, fmt) - x).abs().unflatten(-1, (-1, fmt.tile)).amax(-1)
    assert (error <= step * 0.5 * 1.002 + 1e-7).all()  # half a step (the float16 scale's rounding aside)
    assert (codes.view(torch.uint8) >= 0).all() and codes.numel() * 8 == x.numel() * fmt.bits


def test_fp8_codes_are_e4m3_of_x_over_the_tiles_scale() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 256) * torch.tensor([1.0, 100.0]).repeat_interleave(128)
    codes, scales = quantize_tiles(x, FP8)
    assert codes.dtype == torch.float8_e4m3fn and scales.dtype == torch.float32 and scales.shape == (2, 2)
    torch.testing.assert_close(scales, x.unflatten(-1, (2, 128)).abs().amax(-1) / 448)
    back = dequantize_tiles(codes, scales, FP8)
    assert ((back - x).abs() <= x.abs() * 2**-4 + scales.repeat_interleave(128, -1) * 2**-9).all()  # 3 mantissa bits


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_pack_and_unpack_are_inverse(bits: int) -> None:
    codes = torch.randint(0, 2**bits, (3, 16), dtype=torch.uint8)
    packed = _pack(codes, bits)
    assert packed.shape == (3, 16 * bits // 8)
    assert torch.equal(_unpack(packed, bits), codes)


@pytest.mark.parametrize(("fmt", "atol"), [(Q8_0, 0.02), (FP8, 0.06), (Q4_0, 0.3)], ids=["q8_0", "fp8", "q4_0"])
@pytest.mark.parametrize("K", [4, 2])
@torch.no_grad()
def test_cached_decoding_with_a_tile_cache_is_close_to_the_full_pass(fmt, atol: float, K: int) -> None:
    torch.manual_seed(0)
    layer = MultiHeadAttention(256, 4, num_kv_heads=K).eval()
    x = torch.randn(2, 9, 256)
    full = layer(x, is_causal=True)
    cache = TileQuantizedCache(2, K, 64, 12, fmt)
    outs = [layer(x[:, :4], is_causal=True, cache=cache)]
    outs += [layer(x[:, t : t + 1], is_causal=True, cache=cache) for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(outs, dim=1), full, atol=atol, rtol=0)
    assert cache.length == 9


@torch.no_grad()
def test_the_tile_cache_returns_the_round_trip_of_what_it_was_given() -> None:
    torch.manual_seed(0)
    cache = TileQuantizedCache(1, 2, 32, 8, Q4_0)
    k, v = torch.randn(1, 2, 5, 32), torch.randn(1, 2, 5, 32)
    cache.update(k[:, :, :3], v[:, :, :3])
    keys, _ = cache.update(k[:, :, 3:], v[:, :, 3:])
    rows = k.transpose(1, 2).flatten(2)  # (B, T, K*E): the tiles run along each token's row of both heads
    expect = dequantize_tiles(*quantize_tiles(rows, Q4_0), Q4_0).unflatten(-1, (2, 32)).transpose(1, 2)
    assert torch.equal(keys, expect)
    assert not torch.equal(keys, k)


@pytest.mark.parametrize("bits", [2, 4])
@torch.no_grad()
def test_cached_decoding_with_kivi_is_close_to_the_full_pass(bits: int) -> None:
    torch.manual_seed(0)
    layer = MultiHeadAttention(64, 4, num_kv_heads=2).eval()
    x = torch.randn(1, 20, 64)
    full = layer(x, is_causal=True)
    cache = KIVICache(1, 2, 16, 24, bits=bits, residual=4)
    outs = [layer(x[:, :6], is_causal=True, cache=cache)] + [layer(x[:, t : t + 1], is_causal=True, cache=cache)
                                                             for t in range(6, 20)]
    torch.testing.assert_close(torch.cat(outs, dim=1), full, atol=0.6 if bits == 2 else 0.15, rtol=0)


@pytest.mark.parametrize("make", [lambda: TileQuantizedCache(1, 2, 16, 12, Q8_0),
                                  lambda: KIVICache(1, 2, 16, 12, residual=3)], ids=["tile", "kivi"])
@pytest.mark.parametrize("keep", [0, 2, 5, 6, 8])
@torch.no_grad()
def test_truncate_keeps_the_prefix_as_it_was_read(make, keep: int) -> None:
    torch.manual_seed(0)
    k, v = torch.randn(1, 2, 10, 16), torch.randn(1, 2, 10, 16)
    cache = make()
    cache.update(k[:, :, :5], v[:, :, :5])
    for t in range(5, 8):
        cache.update(k[:, :, t : t + 1], v[:, :, t : t + 1])
    whole = copy.deepcopy(cache)  # the same cache, not truncated: what it holds for each position
    held, _ = whole.update(k[:, :, 9:], v[:, :, 9:])
    cache.truncate(keep)  # rejected draft tokens, a failed step
    assert cache.length == keep
    after, _ = cache.update(k[:, :, 9:], v[:, :, 9:])
    assert torch.equal(after[:, :, :keep], held[:, :, :keep])
    torch.testing.assert_close(after[:, :, keep:], k[:, :, 9:], atol=0.02, rtol=0)
    assert cache.length == keep + 1


@torch.no_grad()
def test_kivi_keys_per_channel_beat_per_token_on_outlier_channels() -> None:
    torch.manual_seed(0)
    keys = torch.randn(1, 1, 32, 16)
    keys[..., 3] += 20  # one channel large for every token, as real models' keys have (KIVI, figure 2)
    cache = KIVICache(1, 1, 16, 40, residual=32)
    cache.update(keys, keys)  # one block of 32
    per_channel, per_token = cache._keys_values()
    codes, scale, low = _quantize_min_max(keys, 3, 2)  # per token instead, as the values are
    token_wise = codes.float() * scale.float() + low.float()
    assert (per_channel - keys).norm() < 0.5 * (token_wise - keys).norm()
    assert torch.allclose(per_token, token_wise)  # the values were quantized per token


def _schedule(update, steps: list[int], E: int = 4) -> list[list[bool]]:
    """For each step, which returned positions are the keys as given (full precision), by exact equality."""
    torch.manual_seed(0)
    k = torch.randn(1, 1, sum(steps), E)
    out, t = [], 0
    for n in steps:
        keys, _ = update(k[:, :, t : t + n], k[:, :, t : t + n])
        out.append(torch.eq(keys, k[:, :, : t + n]).all(-1).flatten().tolist())
        t += n
    return out


@pytest.mark.parametrize(("R", "steps"), [(4, [4] + [1] * 9), (3, [5, 1, 1, 2, 1, 1, 1]), (2, [3, 1, 1, 1, 1])])
def test_kivi_keeps_the_same_tokens_in_full_precision_as_transformers_quantized_cache(R: int, steps) -> None:
    from transformers.cache_utils import QuantizedLayer

    class Rounded(QuantizedLayer):  # transformers' residual schedule with a crude quantizer (no quanto needed)
        def _quantize(self, tensor, axis):
            return (tensor * 2).round() / 2

        def _dequantize(self, q_tensor):
            return q_tensor

    theirs = Rounded(residual_length=R)
    ours = KIVICache(1, 1, 4, sum(steps), residual=R)
    assert _schedule(ours.update, steps) == _schedule(theirs.update, steps)


def test_kivi_differs_from_transformers_on_a_first_update_shorter_than_the_residual() -> None:
    from transformers.cache_utils import QuantizedLayer

    class Rounded(QuantizedLayer):
        def _quantize(self, tensor, axis):
            return (tensor * 2).round() / 2

        def _dequantize(self, q_tensor):
            return q_tensor

    steps = [2, 1]
    theirs = _schedule(Rounded(residual_length=4).update, steps)
    ours = _schedule(KIVICache(1, 1, 4, 4, residual=4).update, steps)
    assert theirs[1] == [False, False, True] and ours[1] == [True, True, True]  # they quantize the first update at once


def test_fp8_codes_equal_transformers_fp8_cache_for_one_tile() -> None:
    from transformers.cache_utils import Fp8QuantizedLayer

    torch.manual_seed(0)
    x = torch.randn(1, 1, 1, 128) * 3  # one token, one tile: transformers' per-tensor scale is the tile's
    their_codes, their_scale = Fp8QuantizedLayer()._quantize(x)
    codes, scales = quantize_tiles(x, FP8)
    assert torch.equal(scales.flatten(), their_scale.flatten())
    assert torch.equal(codes.view(torch.uint8), their_codes.view(torch.uint8))


@torch.no_grad()
def test_fp8_cache_in_a_tiny_llama_against_transformers_fp8_cache() -> None:
    """A tiny random Llama fed the float cache's greedy tokens: our FP8 cache (a scale per 128 numbers) gives logits
    as close to the float cache's as transformers' "fp8" QuantizedCache (one scale per tensor, frozen at the first
    update), within a factor of 3 either way. A float8 number's error is relative to it, so the scale's grain sets
    the range, not the precision. (A random model's logits are near ties: free greedy runs part ways on a rounding.)"""
    import transformers
    from transformers.cache_utils import Cache, DynamicCache, DynamicLayer, QuantizedCache

    class Ours(DynamicLayer):  # transformers' layer interface around our cache
        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
                B, K, _, E = key_states.shape
                self.ours = TileQuantizedCache(B, K, E, 64, FP8)
            self.keys, self.values = self.ours.update(key_states, value_states)
            return self.keys, self.values

    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=256, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(cfg).eval()
    prompt = torch.randint(0, 64, (1, 8))

    def decode(cache, forced: list[int] | None = None) -> tuple[list[int], torch.Tensor]:
        """Greedy decoding, or the tokens ``forced`` fed in turn (the same inputs for every cache)."""
        ids, logits, out = prompt, [], []
        for i in range(12):
            step = model(ids, past_key_values=cache, use_cache=True).logits[:, -1]
            logits.append(step)
            out.append(int(step.argmax()) if forced is None else forced[i])
            ids = torch.tensor([[out[-1]]])
        return out, torch.cat(logits)

    float_ids, float_logits = decode(DynamicCache(config=cfg))
    _, their_logits = decode(QuantizedCache("fp8", cfg), float_ids)
    _, our_logits = decode(Cache(layers=[Ours() for _ in range(2)]), float_ids)
    ours, theirs = (our_logits - float_logits).abs().max(), (their_logits - float_logits).abs().max()
    assert 0 < ours < 0.05 and 0 < theirs < 0.05  # both close to the float cache
    assert ours < 3 * theirs and theirs < 3 * ours  # float8's error is relative: a scale per tile or per tensor alike


def test_hadamard_is_orthogonal_and_spreads_a_coordinate() -> None:
    H = hadamard(16, dtype=torch.float64)
    torch.testing.assert_close(H @ H.T, torch.eye(16, dtype=torch.float64))
    assert torch.allclose(H[:, 3].abs(), torch.full((16,), 0.25, dtype=torch.float64))  # one channel, everywhere
    with pytest.raises(ValueError, match="n must be a power of two"):
        hadamard(12)


@torch.no_grad()
def test_a_rotation_leaves_attention_unchanged_over_a_float_cache() -> None:
    """q . k = (q R) . (k R): keys rotated, stored, rotated back, and the layer decodes as the full pass does."""
    torch.manual_seed(0)
    layer = MultiHeadAttention(64, 4, num_kv_heads=2).double().eval()
    x = torch.randn(1, 7, 64, dtype=torch.float64)
    full = layer(x, is_causal=True)
    random = torch.linalg.qr(torch.randn(16, 16, dtype=torch.float64))[0]
    for R in (hadamard(16, dtype=torch.float64), random):
        inner = KVCache(1, 2, 16, 8, dtype=torch.float64)
        cache = RotatedKeysCache(inner, R)
        outs = [layer(x[:, :3], is_causal=True, cache=cache)]
        outs += [layer(x[:, t : t + 1], is_causal=True, cache=cache) for t in range(3, 7)]
        torch.testing.assert_close(torch.cat(outs, dim=1), full)
        assert cache.length == inner.length == 7
        _, k, _ = layer.project_qkv(x)  # (1, 2, 7, 16): the keys the layer cached
        torch.testing.assert_close(inner.k[:, :, :7], k @ R)  # stored rotated
        cache.truncate(2)
        assert inner.length == 2


@torch.no_grad()
def test_a_hadamard_rotation_spreads_an_outlier_channel_before_per_token_tiles() -> None:
    torch.manual_seed(0)
    keys = torch.randn(1, 1, 16, 32)
    keys[..., 3] *= 20  # one channel far larger than the rest: it sets every token's scale
    plain = TileQuantizedCache(1, 1, 32, 16, Q4_0)  # K * E = 32: one tile, one scale, per token
    rotated = RotatedKeysCache(TileQuantizedCache(1, 1, 32, 16, Q4_0), hadamard(32))
    error = {name: (c.update(keys, keys)[0] - keys).norm() for name, c in (("plain", plain), ("rotated", rotated))}
    assert error["rotated"] < 0.6 * error["plain"], error
    assert rotated.nbytes == plain.nbytes
