"""lessons_src.lab.hybrid_models: the layer pattern, equal sizes, the copy task and its measure, and the committed
log of ``make train-hybrids`` (tools/train/train_hybrids.py) against the code that wrote it."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from lessons_src.lab.hybrid_models import (
    LAYER_KINDS,
    PATTERNS,
    GatedDeltaNet,
    HybridConfig,
    HybridLM,
    copy_accuracy,
    copy_batch,
    parameter_count,
    pattern,
    read_hybrid_log,
)
from lessons_src.layer import MultiHeadAttention

ROOT = Path(__file__).resolve().parents[2]
import train_hybrids  # noqa: E402


def _tiny(layers: str) -> HybridLM:
    torch.manual_seed(0)
    return HybridLM(HybridConfig(vocab_size=16, d_model=16, num_heads=2, layers=layers, d_ff=8, chunk_size=4))


def test_the_three_models_have_parameter_counts_within_five_percent() -> None:
    counts = {name: parameter_count(train_hybrids.config(name)) for name in PATTERNS}
    assert max(counts.values()) <= 1.05 * min(counts.values()), counts
    layers = {train_hybrids.config(name).layers for name in PATTERNS}
    assert layers == {"LLLL", "LLLF", "FFFF"}  # all-linear, 3:1 (Qwen3-Next's order), all-attention
    model = HybridLM(train_hybrids.config("hybrid 3:1"))
    mixers = zip(model.cfg.layers, model.mixers, strict=True)
    by_kind = {c: sum(p.numel() for p in mixer.parameters()) for c, mixer in mixers}
    assert by_kind["L"] != by_kind["F"]  # the two kinds of layer differ; the totals stay close


@pytest.mark.parametrize("layers", ["LLLF", "FLLL", "LFLF", "FFFF", "LLLL"])
def test_each_layer_runs_the_kind_its_letter_names(layers: str) -> None:
    """The pattern is obeyed: the mixers built and the order they run in (hooks record each call), and only the
    full layers hold a softmax attention that can reach every earlier token."""
    model = _tiny(layers)
    ran: list[str] = []
    for mixer in model.mixers:
        mixer.register_forward_hook(lambda m, args, out: ran.append("L" if isinstance(m, GatedDeltaNet) else "F"))
    model(torch.randint(0, 16, (2, 9)))
    assert "".join(ran) == layers
    attentions = [any(isinstance(m, MultiHeadAttention) for m in mixer.modules()) for mixer in model.mixers]
    assert attentions == [c == "F" for c in layers]
    assert model.cfg.kinds == tuple(LAYER_KINDS[c] for c in layers)


def test_the_layers_are_causal_and_the_linear_layer_keeps_the_distant_past() -> None:
    """Changing the last token changes nothing before it; changing the first changes the last output (the state
    carries it), in both kinds of layer."""
    for layers in ("LL", "FF"):
        model = _tiny(layers).eval()
        tokens = torch.randint(0, 16, (1, 12), generator=torch.Generator().manual_seed(1))
        late, early = tokens.clone(), tokens.clone()
        late[0, -1], early[0, 0] = (tokens[0, -1] + 1) % 16, (tokens[0, 0] + 1) % 16
        with torch.no_grad():
            base, after_late, after_early = model(tokens), model(late), model(early)
        torch.testing.assert_close(after_late[:, :-1], base[:, :-1])
        assert (after_early[0, -1] - base[0, -1]).abs().max() > 1e-6, layers


def test_bad_patterns_and_sizes_are_named() -> None:
    with pytest.raises(ValueError, match=r"unknown layer kind 'A', 'x' in layers='LAxF': each must be one of 'L'"):
        HybridConfig(vocab_size=8, d_model=8, num_heads=2, layers="LAxF")
    with pytest.raises(ValueError, match="layers must be a non-empty string"):
        HybridConfig(vocab_size=8, d_model=8, num_heads=2, layers="")
    with pytest.raises(ValueError, match="d_model=10 is not divisible by num_heads=4; head counts that divide 10 are"):
        HybridConfig(vocab_size=8, d_model=10, num_heads=4, layers="LF")
    with pytest.raises(ValueError, match=r"d_ff must be at least 0 \(0: no MLP\)"):
        HybridConfig(vocab_size=8, d_model=8, num_heads=2, layers="LF", d_ff=-1)
    with pytest.raises(ValueError, match=r"name must be one of 'all-linear', 'hybrid 3:1', .*; got name='hybrid'"):
        pattern("hybrid", 4)
    with pytest.raises(ValueError, match="num_layers must be a multiple of 4; got 6"):
        pattern("hybrid 3:1", 6)
    model = _tiny("LF")
    with pytest.raises(ValueError, match=r"tokens outside the vocabulary 0..15: \[16\]"):
        model(torch.tensor([[1, 16]]))
    with pytest.raises(ValueError, match=r"tokens must be 2-D \(B, T\) of token ids; got shape \(2,\)"):
        model(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match=r"distances must lie in 2 \.\. min"):
        copy_batch(torch.Generator(), 1, 8, 16, [5])  # 2 * 5 > 8


def test_a_copy_batch_repeats_each_rows_tokens_at_its_distance() -> None:
    tokens, distance = copy_batch(torch.Generator().manual_seed(0), 64, 40, 32, range(2, 21))
    for row, dist in zip(tokens, distance, strict=True):
        n = int(dist.max())
        assert 2 <= n <= 20 and len(set(row[:n].tolist())) == n  # n distinct tokens
        assert torch.equal(row[n : 2 * n], row[:n])
        expected = torch.zeros_like(dist)
        expected[n : 2 * n - 1] = n  # predicting n + 1 .. 2n - 1, each a copy from n back
        assert torch.equal(dist, expected)
        t = torch.nonzero(dist).flatten()
        assert torch.equal(row[t + 1], row[t + 1 - n])
    assert len({int(d.max()) for d in distance}) > 10  # the distances vary


class _Induction(nn.Module):
    """Predicts the token after the earlier copy of the current one (uniform where there is none)."""

    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.cfg = HybridConfig(vocab_size=vocab_size, d_model=2, num_heads=1, layers="F")

    def forward(self, tokens: Tensor) -> Tensor:
        logits = torch.zeros(*tokens.shape, self.cfg.vocab_size)
        for b, row in enumerate(tokens.tolist()):
            for t, tok in enumerate(row):
                earlier = [s for s in range(t) if row[s] == tok]
                if earlier:
                    logits[b, t, row[earlier[0] + 1]] = 1.0
        return logits


def test_copy_accuracy_scores_the_copies_alone() -> None:
    """An exact induction lookup scores 1 at every distance; a model that always says token 0 about 1 / V."""
    perfect = copy_accuracy(_Induction(24), [2, 5, 11], rows=8)  # type: ignore[arg-type]
    assert perfect == {2: 1.0, 5: 1.0, 11: 1.0}
    zero = copy_accuracy(HybridLM(HybridConfig(vocab_size=24, d_model=4, num_heads=1, layers="F")).requires_grad_(False)
                         .apply(lambda m: nn.init.zeros_(m.weight) if isinstance(m, nn.Linear) else None)
                         .apply(lambda m: nn.init.zeros_(m.weight) if isinstance(m, nn.Embedding) else None),
                         [11], rows=64)  # every logit 0: argmax is token 0
    assert 0 < zero[11] < 0.2


def test_the_log_is_what_the_code_gives() -> None:
    """Settings, patterns and parameter counts in the committed log are the training script's and the code's; every
    step has a loss, every evaluation distance an accuracy; each run took under ten CPU minutes."""
    log = read_hybrid_log()
    t = train_hybrids
    assert log["steps"] == t.STEPS and log["seed"] == t.SEED and log["batch"] == t.BATCH and log["lr"] == t.LR
    assert log["eval_distances"] == list(t.EVAL_DISTANCES) and log["seq_len"] == t.SEQ_LEN
    assert log["distances"] == [min(t.DISTANCES), max(t.DISTANCES)] and log["torch"].startswith("2.")
    assert list(log["models"]) == list(PATTERNS)
    for name, run in log["models"].items():
        cfg = t.config(name)
        assert log["config"] == {k: v for k, v in asdict(cfg).items() if k != "layers"}
        assert run["layers"] == cfg.layers and run["parameters"] == parameter_count(cfg)
        assert len(run["loss"]) == log["steps"] and run["train_cpu_seconds"] < 600
        assert [int(d) for d in run["accuracy"]] == log["eval_distances"]
        assert all(0 <= a <= 1 for a in run["accuracy"].values())


def test_the_first_steps_from_the_seed_give_the_logged_losses() -> None:
    """`make train-hybrids` reproduces without running it whole: the hybrid's first steps give its logged losses."""
    log = read_hybrid_log()
    steps = 2
    got = train_hybrids.train_one("hybrid 3:1", log["steps"], log["seed"], stop_after=steps)["loss"]
    # Equal on the machine that trained it; another CPU's kernels may sum in another order.
    torch.testing.assert_close(torch.tensor(got), torch.tensor(log["models"]["hybrid 3:1"]["loss"][:steps]),
                               atol=5e-4, rtol=0)


def _qwen3_next_layer(D: int, H: int, E: int) -> nn.Module:
    import warnings

    from transformers import Qwen3NextConfig
    from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextGatedDeltaNet

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = Qwen3NextConfig(hidden_size=D, num_hidden_layers=1, layer_types=["linear_attention"],
                              linear_num_key_heads=H, linear_num_value_heads=H, linear_key_head_dim=E,
                              linear_value_head_dim=E, linear_conv_kernel_dim=4, rms_norm_eps=1e-6)
    return Qwen3NextGatedDeltaNet(cfg, layer_idx=0).eval()


def _copy_into_ours(theirs: nn.Module, ours: GatedDeltaNet) -> None:
    """transformers groups each key head's q, k, v, z (and b, a) together; ours keeps all heads' q, then k, ..."""
    H, E = ours.num_heads, ours.head_dim
    with torch.no_grad():
        w = theirs.in_proj_qkvz.weight  # (H * 4E, D): per head [q_h, k_h, v_h, z_h]
        ours.qkvz.weight.copy_(w.view(H, 4, E, -1).transpose(0, 1).reshape(4 * H * E, -1))
        ours.ba.weight.copy_(theirs.in_proj_ba.weight.view(H, 2, -1).transpose(0, 1).reshape(2 * H, -1))
        ours.conv.weight.copy_(theirs.conv1d.weight)  # both over [all q, all k, all v], head by head
        ours.A_log.copy_(theirs.A_log)
        ours.dt_bias.copy_(theirs.dt_bias)
        ours.norm_weight.copy_(theirs.norm.weight)
        ours.out.weight.copy_(theirs.out_proj.weight)


def test_the_linear_layer_is_qwen3_nexts_gated_deltanet() -> None:
    """Weights copied from transformers' Qwen3NextGatedDeltaNet (as many value heads as key heads, its torch path):
    the same outputs. Leaving out the short convolution, the output gate or the decay breaks the match."""
    D, H, E, T = 32, 2, 16, 40  # T over one chunk of ours (32) and of theirs (64) both ways
    torch.manual_seed(0)
    theirs = _qwen3_next_layer(D, H, E)
    for p in theirs.parameters():
        torch.nn.init.normal_(p, std=0.3)
    ours = GatedDeltaNet(D, H, chunk_size=32).eval()
    _copy_into_ours(theirs, ours)
    x = torch.randn(2, T, D)
    with torch.no_grad():
        want = theirs(x)
        assert torch.allclose(ours(x), want, atol=2e-5, rtol=1e-4), (ours(x) - want).abs().max()
        # Small inputs: queries and keys of length about 1e-3, where the models' x * rsqrt(sum x^2 + 1e-6) is not
        # F.normalize's x / max(|x|, eps) (25% apart there).
        small = theirs(x * 1e-3)
        assert torch.allclose(ours(x * 1e-3), small, atol=2e-8, rtol=1e-4), (ours(x * 1e-3) - small).abs().max()

    def without_convolution(m: GatedDeltaNet) -> None:
        m.conv.weight.zero_()
        m.conv.weight[..., -1] = 1.0  # each channel passes its current token only

    def without_decay(m: GatedDeltaNet) -> None:
        m.A_log.fill_(-30.0)  # exp(A_log) ~ 0: the state never fades

    def without_output_gate(m: GatedDeltaNet) -> None:
        m.qkvz.weight[3 * H * E:] = 0.0  # z = 0 everywhere: every head's output scaled by the same silu(0)

    for broken in (without_convolution, without_decay, without_output_gate):
        copy = GatedDeltaNet(D, H, chunk_size=32).eval()
        _copy_into_ours(theirs, copy)
        with torch.no_grad():
            broken(copy)
            assert not torch.allclose(copy(x), want, atol=1e-3), broken.__name__
