"""lessons_src.kv_cache: cached decoding equals the full causal pass; sizes equal their formulas; bad input raises."""

from __future__ import annotations

import pytest
import torch

from lessons_src import MultiHeadAttention
from lessons_src.kv_cache import KVCache, LatentCache, LayerCache, kv_bytes_per_token, latent_bytes_per_token


@pytest.mark.parametrize("K", [6, 3, 2, 1])  # MHA, GQA, GQA, MQA
@pytest.mark.parametrize("steps", [[4, 1, 1, 1, 1, 1], [1] * 9, [2, 3, 4], [9]])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])  # float32 runs the fused kernel
@torch.no_grad()
def test_cached_decoding_equals_full_causal_pass(K: int, steps: list[int], bias: bool, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    layer = MultiHeadAttention(24, 6, num_kv_heads=K, bias=bias).to(dtype).eval()
    x = torch.randn(2, sum(steps), 24, dtype=dtype)
    full = layer(x, is_causal=True)
    cache = KVCache(2, K, 4, max_len=12, dtype=dtype)
    outs, t = [], 0
    for n in steps:
        outs.append(layer(x[:, t : t + n], is_causal=True, cache=cache, cache_position=t))
        t += n
    torch.testing.assert_close(torch.cat(outs, dim=1), full)
    assert cache.length == sum(steps)


@torch.no_grad()
def test_cached_decoding_with_weights_and_padding() -> None:
    """The explicit path and a padding mask work with a cache too (the mask covers all S positions)."""
    torch.manual_seed(1)
    layer = MultiHeadAttention(16, 4, num_kv_heads=2).double().eval()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    keep = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    keep[1, ..., 0] = False  # sequence 2 hides its first token from everyone
    full, w_full = layer.with_weights(x, is_causal=True, attn_mask=keep)
    cache = KVCache(2, 2, 4, max_len=6, dtype=torch.float64)
    layer(x[:, :4], is_causal=True, attn_mask=keep[..., :4], cache=cache)
    out, w = layer.with_weights(x[:, 4:], is_causal=True, attn_mask=keep, cache=cache, cache_position=4)
    torch.testing.assert_close(out, full[:, 4:])
    torch.testing.assert_close(w, w_full[:, :, 4:])


@pytest.mark.parametrize(("K", "E", "Ev", "dtype"), [(8, 64, 64, torch.float32), (2, 16, 8, torch.bfloat16)])
def test_kv_nbytes_equals_formula(K: int, E: int, Ev: int, dtype: torch.dtype) -> None:
    cache = KVCache(3, K, E, max_len=20, v_head_dim=Ev, dtype=dtype)
    assert cache.nbytes == 0
    cache.update(torch.zeros(3, K, 7, E, dtype=dtype), torch.zeros(3, K, 7, Ev, dtype=dtype))
    size = torch.empty((), dtype=dtype).element_size()
    assert cache.nbytes == 3 * 7 * kv_bytes_per_token(K, E, dtype, v_head_dim=Ev) == 3 * 7 * K * (E + Ev) * size
    cache.reset()
    assert cache.length == 0 and cache.nbytes == 0


def test_latent_nbytes_equals_formula() -> None:
    cache = LatentCache(2, 32, 8, max_len=10)
    cache.update(torch.zeros(2, 5, 32), torch.zeros(2, 5, 8))
    assert cache.nbytes == 2 * 5 * latent_bytes_per_token(32, 8, torch.float32) == 2 * 5 * 40 * 4


def test_update_returns_everything_cached() -> None:
    cache = KVCache(1, 1, 2, max_len=5)
    a, b = torch.randn(1, 1, 2, 2), torch.randn(1, 1, 1, 2)
    cache.update(a, a)
    k, v = cache.update(b, b)
    torch.testing.assert_close(k, torch.cat([a, b], dim=2))
    torch.testing.assert_close(v, k)


@pytest.mark.parametrize(
    ("k_shape", "v_shape", "pattern"),
    [
        ((3, 2, 1, 4), (3, 2, 1, 4), r"k of shape \(3, 2, 1, 4\) does not fit .* \(B, K, T, E\) = \(2, 2, 'T', 4\)"),
        ((2, 1, 1, 4), (2, 1, 1, 4), r"k of shape \(2, 1, 1, 4\) does not fit"),
        ((2, 2, 1, 4), (2, 2, 1, 5), r"v of shape \(2, 2, 1, 5\) does not fit .* \(B, K, T, Ev\)"),
        ((2, 2, 4), (2, 2, 4), r"k of shape \(2, 2, 4\) does not fit"),
        ((2, 2, 1, 4), (2, 2, 2, 4), r"same number of positions"),
    ],
)
def test_kv_update_rejects_mismatches(k_shape, v_shape, pattern) -> None:
    cache = KVCache(2, 2, 4, max_len=8)
    with pytest.raises(ValueError, match=pattern):
        cache.update(torch.zeros(k_shape), torch.zeros(v_shape))
    assert cache.length == 0  # nothing was written


def test_growing_past_max_len_raises() -> None:
    cache = KVCache(1, 1, 4, max_len=5)
    cache.update(torch.zeros(1, 1, 4, 4), torch.zeros(1, 1, 4, 4))
    with pytest.raises(ValueError, match=r"holds 4 of max_len=5 positions and cannot take 2 more; .* max_len >= 6"):
        cache.update(torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4))
    latent = LatentCache(1, 4, 2, max_len=3)
    with pytest.raises(ValueError, match=r"max_len=3 .* max_len >= 4"):
        latent.update(torch.zeros(1, 4, 4), torch.zeros(1, 4, 2))


@torch.no_grad()
def test_layer_with_wrong_cache_raises() -> None:
    layer = MultiHeadAttention(16, 4, num_kv_heads=2)
    with pytest.raises(ValueError, match=r"k of shape \(1, 2, 3, 4\) does not fit"):
        layer(torch.randn(1, 3, 16), is_causal=True, cache=KVCache(2, 2, 4, max_len=8))  # batch 2 cache, batch 1 input
    with pytest.raises(ValueError, match=r"k of shape \(1, 2, 3, 4\) does not fit"):
        layer(torch.randn(1, 3, 16), is_causal=True, cache=KVCache(1, 4, 4, max_len=8))  # cache made for MHA


def test_dtype_and_size_errors() -> None:
    cache = KVCache(1, 1, 4, max_len=4)
    with pytest.raises(ValueError, match=r"dtype torch.float64 but the cache stores torch.float32"):
        cache.update(torch.zeros(1, 1, 1, 4, dtype=torch.float64), torch.zeros(1, 1, 1, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"max_len must be at least 1; got max_len=0"):
        KVCache(1, 1, 4, max_len=0)
    with pytest.raises(ValueError, match=r"kv_latent_dim must be at least 1; got kv_latent_dim=0"):
        LatentCache(1, 0, 4, max_len=4)
    with pytest.raises(ValueError, match=r"latent of shape \(2, 1, 4\) does not fit .* \(B, T, C\)"):
        LatentCache(1, 4, 2, max_len=4).update(torch.zeros(2, 1, 4), torch.zeros(2, 1, 2))


@torch.no_grad()
def test_bad_mask_leaves_the_cache_untouched() -> None:
    layer = MultiHeadAttention(16, 4, num_kv_heads=2)
    cache = KVCache(1, 2, 4, max_len=8)
    layer(torch.randn(1, 3, 16), is_causal=True, cache=cache)
    with pytest.raises(ValueError, match=r"not broadcastable .* \(B, H, T, S\) = \(1, 4, 1, 4\)"):
        layer(torch.randn(1, 1, 16), attn_mask=torch.ones(1, 3, dtype=torch.bool), cache=cache)
    assert cache.length == 3


@pytest.mark.parametrize("cache_kind", ["rolling", "latent", "dict"])
def test_forward_refuses_a_cache_that_is_not_a_kv_cache_before_touching_it(cache_kind: str) -> None:
    """Only a LayerCache can be truncated when a step fails; anything else is refused untouched."""
    from lessons_src.kv_cache import RollingKVCache

    mha = MultiHeadAttention(16, 4, num_kv_heads=2).eval()
    cache: object = {
        "rolling": RollingKVCache(1, 2, 4, window=3),
        "latent": LatentCache(1, 8, 2, 8),
        "dict": {"k": None},
    }[cache_kind]
    before = {n: t.clone() for n, t in getattr(cache, "__dict__", {}).items() if isinstance(t, torch.Tensor)}
    wanted = rf"cache must be a LayerCache such as KVCache .*, not a {type(cache).__name__}"
    with torch.no_grad(), pytest.raises(TypeError, match=wanted):
        mha(torch.randn(1, 4, 16), is_causal=True, cache=cache)  # type: ignore[arg-type]
    assert getattr(cache, "length", 0) == 0
    for name, t in before.items():
        assert torch.equal(getattr(cache, name), t), f"{name} was written by the refused step"


class _ListCache(LayerCache):
    """A LayerCache of another layout: a list of per-step tensors, joined on each update (for the tests only)."""

    def __init__(self) -> None:
        self.length, self.steps, self.truncated, self.fail = 0, [], [], False

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.steps.append((k, v))
        self.length += k.shape[2]
        if self.fail:  # appended, then failed: the layer must forget what was appended
            raise RuntimeError("the store failed after appending")
        return torch.cat([s[0] for s in self.steps], 2), torch.cat([s[1] for s in self.steps], 2)

    def truncate(self, length: int) -> None:
        super().truncate(length)
        self.truncated.append(length)
        kept, n = [], 0
        for k, v in self.steps:
            if n < length:
                kept.append((k[:, :, : length - n], v[:, :, : length - n]))
            n += k.shape[2]
        self.steps = kept

    @property
    def nbytes(self) -> int:
        return sum(k.nbytes + v.nbytes for k, v in self.steps)


def test_the_layer_decodes_with_any_layer_cache_and_truncates_it_on_a_failed_step() -> None:
    """A LayerCache subclass of another layout gives the KVCache's outputs; a failing step calls its truncate."""
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, num_kv_heads=2).eval()
    x = torch.randn(1, 6, 16)
    ours, theirs = _ListCache(), KVCache(1, 2, 4, max_len=6)
    with torch.no_grad():
        for cache in (ours, theirs):
            cache.out = [mha(x[:, :3], is_causal=True, cache=cache)]  # type: ignore[attr-defined]
            cache.out += [mha(x[:, t : t + 1], cache=cache) for t in range(3, 6)]  # type: ignore[attr-defined]
    for a, b in zip(ours.out, theirs.out, strict=True):  # type: ignore[attr-defined]
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    ours.truncate(4)  # rejected drafts, say: keep 4 of 6
    ours.fail = True
    with torch.no_grad(), pytest.raises(RuntimeError, match="after appending"):
        mha(x[:, 4:5], cache=ours)
    assert ours.truncated == [4, 4] and ours.length == 4 and sum(k.shape[2] for k, _ in ours.steps) == 4


@pytest.mark.parametrize(("length", "error", "pattern"), [
    (-1, ValueError, "length must be at least 0"), (4, ValueError, "holds only 3 positions"),
    (1.0, TypeError, "length must be an int"), (True, TypeError, "length must be an int"),
])
def test_truncate_refuses_what_it_cannot_keep(length: object, error: type, pattern: str) -> None:
    cache = KVCache(1, 1, 2, max_len=5)
    cache.update(torch.randn(1, 1, 3, 2), torch.randn(1, 1, 3, 2))
    with pytest.raises(error, match=pattern):
        cache.truncate(length)  # type: ignore[arg-type]
    assert cache.length == 3
    cache.truncate(1)
    assert cache.length == 1 and cache.nbytes == kv_bytes_per_token(1, 2, torch.float32)
