"""lessons_src.lab.heads: pattern and induction scores on hand-built maps, ablation against a manual computation."""

from __future__ import annotations

import pytest
import torch

from lessons_src import MultiHeadAttention, explicit_attention
from lessons_src.lab.heads import (
    ablate_heads,
    classify_heads,
    copying_score,
    ov_circuit,
    pattern_scores,
    prefix_matching_score,
    previous_token_score,
)


def one_hot_rows(targets: list[int], T: int) -> torch.Tensor:
    w = torch.zeros(T, T)
    w[torch.arange(T), torch.tensor(targets)] = 1.0
    return w


def test_previous_token_score() -> None:
    w = one_hot_rows([0, 0, 1, 2, 3], 5)  # every query i >= 1 attends to i - 1
    assert previous_token_score(w).item() == 1.0
    assert previous_token_score(torch.eye(5)).item() == 0.0
    uniform = torch.full((2, 3, 4, 4), 0.25)
    assert previous_token_score(uniform).shape == (2, 3)


def test_prefix_matching_score() -> None:
    n = 4  # sequence a b c d a b c d: query i >= n attends to i - n + 1
    targets = [0, 0, 1, 2, 1, 2, 3, 4]
    assert prefix_matching_score(one_hot_rows(targets, 2 * n), n).item() == 1.0
    assert prefix_matching_score(one_hot_rows(list(range(8)), 8), n).item() == 0.0
    with pytest.raises(ValueError, match="T = 2 n"):
        prefix_matching_score(torch.eye(6), 4)


def test_copying_score_signs() -> None:
    torch.manual_seed(0)
    q = torch.linalg.qr(torch.randn(6, 6)).Q
    assert copying_score(q @ torch.diag(torch.rand(6) + 0.1) @ q.T).item() == pytest.approx(1.0)
    assert copying_score(-torch.eye(6)).item() == pytest.approx(-1.0)
    with pytest.raises(ValueError, match="square"):
        copying_score(torch.ones(2, 3))


def test_ov_circuit_is_the_direct_logit_effect() -> None:
    torch.manual_seed(0)
    V, D, H = 7, 8, 2
    mha = MultiHeadAttention(D, H)
    embed, unembed = torch.randn(V, D), torch.randn(V, D)
    for head in range(H):
        keep = torch.zeros(1, H)
        keep[0, head] = 1.0
        # attending fully to a single position holding token a: the layer returns W_O (W_V e_a) for this head
        x = embed[:, None, :]  # (V, 1, D): one-token sequences, each attends to itself only
        with ablate_heads([mha], keep):
            out = mha(x)[:, 0]  # (V, D)
        torch.testing.assert_close(ov_circuit(embed, mha, unembed, head), out @ unembed.T)
    with pytest.raises(ValueError, match=r"heads 0 \.\. 1"):
        ov_circuit(embed, mha, unembed, 2)


def test_pattern_scores_on_built_maps() -> None:
    ids = torch.tensor([101, 5, 6, 5, 7, 102])  # [CLS] a b a c [SEP]
    T = len(ids)
    prev = one_hot_rows([0, 0, 1, 2, 3, 4], T)
    s = pattern_scores(prev, ids)
    assert s["previous"].item() == 1.0 and s["next"].item() == 0.0 and s["entropy"].item() == 0.0
    sink = one_hot_rows([0, 5, 0, 5, 0, 5], T)
    assert pattern_scores(sink, ids)["sink"].item() == 1.0
    same = torch.eye(T)
    same[1] = same[3] = torch.tensor([0, 0.5, 0, 0.5, 0, 0])  # the two a's attend to both a's
    assert pattern_scores(same, ids)["same token"].item() == 1.0
    uniform = torch.full((T, T), 1 / T)
    assert pattern_scores(uniform, ids)["entropy"].item() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="token_ids of shape"):
        pattern_scores(uniform, ids[:4])


def test_classify_heads() -> None:
    zero = torch.zeros(1, 3)
    scores = {
        "previous": torch.tensor([[0.9, 0.1, 0.0]]),
        "next": zero,
        "same token": zero,
        "sink": torch.tensor([[0.05, 0.2, 0.1]]),
        "entropy": torch.tensor([[0.1, 0.9, 0.3]]),
    }
    assert classify_heads(scores) == [["previous", "broad", "mixed"]]


@pytest.mark.parametrize("bias", [False, True])
def test_ablation_equals_dropping_the_head_by_hand(bias: bool) -> None:
    torch.manual_seed(0)
    D, H = 12, 3
    mha = MultiHeadAttention(D, H, bias=bias).eval()
    x = torch.randn(2, 5, D)
    keep = torch.tensor([[1.0, 0.0, 1.0]])
    with ablate_heads([mha], keep):
        got = mha(x, is_causal=True)
    q, k, v = mha.project_qkv(x)  # (B, H, T, E)
    heads, _ = explicit_attention(q, k, v, is_causal=True)  # (B, H, T, E)
    heads = heads * keep[0][None, :, None, None]
    expected = mha.out_proj(heads.transpose(1, 2).reshape(2, 5, D))
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(mha(x, is_causal=True), mha.out_proj(
        explicit_attention(q, k, v, is_causal=True)[0].transpose(1, 2).reshape(2, 5, D)
    ))  # hooks are gone after the block
    with pytest.raises(ValueError, match=r"\(1, 3\)"), ablate_heads([mha], torch.ones(2, 3)):
        pass
