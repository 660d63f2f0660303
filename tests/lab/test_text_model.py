"""lessons_src.lab.text_model and tools/train/train_text.py: the byte-level GPT, its committed checkpoint and log."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from lessons_src.lab import artifact, data_file
from lessons_src.lab.heads import ablate_heads
from lessons_src.lab.text_model import (
    TEXT_CHECKPOINT,
    TEXT_LOG,
    TextConfig,
    TextGPT,
    corpus_bytes,
    decode,
    encode,
    load_text_model,
    probe_texts,
    read_text_log,
    spaced_windows,
    text_head_scores,
    text_loss,
)
from lessons_src.rope import apply_rope, rope_cos_sin

ROOT = Path(__file__).resolve().parents[2]
import train_text  # noqa: E402

SMALL = TextConfig(d_model=16, num_heads=2, num_layers=2, max_len=12, d_ff=32)


def test_tokenizer_is_utf8_bytes() -> None:
    text = "Attention: Σ softmax(QKᵀ)V — 8 heads"
    ids = encode(text)
    assert ids.tolist() == list(text.encode("utf-8")) and decode(ids) == text
    assert decode([0xE2, 0x80]) == "\ufffd"  # a cut multi-byte character shows U+FFFD
    with pytest.raises(ValueError, match=r"0\.\.255; got \[256, -1\]"):
        decode([65, 256, -1])


def test_a_lone_surrogate_encodes_as_the_browser_does() -> None:
    """The page's TextEncoder writes U+FFFD (EF BF BD) for a lone surrogate; a pair split in two is one character."""
    assert encode("a\ud800b").tolist() == [0x61, 0xEF, 0xBF, 0xBD, 0x62]
    assert encode("\udc00\ud800").tolist() == [0xEF, 0xBF, 0xBD] * 2  # a low then a high: two lone ones
    assert encode("\ud83d\ude42").tolist() == list("🙂".encode())


def test_block_is_multi_head_attention_with_rope() -> None:
    """One block's attention output, recomputed by hand from its MultiHeadAttention's weights and RoPE."""
    torch.manual_seed(0)
    model = TextGPT(SMALL).eval()
    block = model.blocks[0]
    x = torch.randn(3, 10, SMALL.d_model, dtype=torch.float64)
    block.double()
    h = block.ln1(x)
    w = block.attn.qkv_proj.weight  # (3D, D): rows [W_Q; W_K; W_V]
    q, k, v = ((h @ w[i * 16 : (i + 1) * 16].T).view(3, 10, 2, 8).transpose(1, 2) for i in range(3))
    cos, sin = rope_cos_sin(torch.arange(10), 8, dtype=torch.float64)
    ref = torch.nn.functional.scaled_dot_product_attention(apply_rope(q, cos, sin), apply_rope(k, cos, sin), v,
                                                           is_causal=True)  # (B, H, T, E)
    ref = x + block.attn.out_proj(ref.transpose(1, 2).reshape(3, 10, 16))
    ref = ref + block.mlp(block.ln2(ref))
    got, weights = block(x, cos, sin, True)
    torch.testing.assert_close(got, ref)
    assert weights is not None and weights.shape == (3, 2, 10, 10)


def test_qk_norm_norms_each_heads_query_and_key_before_rope() -> None:
    """``TextConfig(qk_norm=True)``: RMS-normalise each head's q and k with a weight per feature, then RoPE.

    The weights are set to distinct values, so the norm applied after RoPE (a weight per feature does not
    commute with a rotation), over the whole projection, or not at all all give other outputs.
    """
    torch.manual_seed(0)
    model = TextGPT(replace(SMALL, qk_norm=True)).double().eval()
    block = model.blocks[0]
    with torch.no_grad():
        block.qk_norm.q_weight.copy_(torch.linspace(0.5, 2.0, 8))
        block.qk_norm.k_weight.copy_(torch.linspace(2.0, 0.25, 8))
    x = torch.randn(3, 10, SMALL.d_model, dtype=torch.float64)
    cos, sin = rope_cos_sin(torch.arange(10), 8, dtype=torch.float64)
    q, k, v = block.attn.project_qkv(block.ln1(x))  # (B, H, T, E)

    def rms(t: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return t / t.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt() * w

    def out(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, E)
        h = x + block.attn.out_proj(y.transpose(1, 2).reshape(3, 10, 16))
        return h + block.mlp(block.ln2(h))

    wq, wk = block.qk_norm.q_weight, block.qk_norm.k_weight
    got, _ = block(x, cos, sin, False)
    torch.testing.assert_close(got, out(apply_rope(rms(q, wq), cos, sin), apply_rope(rms(k, wk), cos, sin)))
    for wrong in (out(rms(apply_rope(q, cos, sin), wq), rms(apply_rope(k, cos, sin), wk)),  # after RoPE
                  out(apply_rope(q, cos, sin), apply_rope(k, cos, sin))):  # no norm
        assert (got - wrong).abs().max() > 1e-3
    assert TextGPT(SMALL).blocks[0].qk_norm is None  # off by default: the committed model has none
    assert load_text_model().cfg.qk_norm is False


def test_largest_scores_are_the_largest_visible_logits() -> None:
    """``largest_scores``: per layer, the largest ``q.k/sqrt(E)`` over the keys each query sees (not the future)."""
    torch.manual_seed(0)
    model = TextGPT(replace(SMALL, qk_norm=True)).eval()
    tokens = torch.randint(0, 256, (2, 9))
    E = SMALL.d_model // SMALL.num_heads
    cos, sin = rope_cos_sin(torch.arange(9), E)
    x, want, everywhere = model.embed(tokens), [], []
    for block in model.blocks:
        q, k, _ = block.queries_keys_values(x, cos, sin)
        s = q @ k.transpose(-2, -1) / E**0.5  # (B, H, T, T)
        want.append(s.masked_fill(~torch.ones(9, 9, dtype=torch.bool).tril(), float("-inf")).amax())
        everywhere.append(s.amax())
        x, _ = block(x, cos, sin, False)
    got = model.largest_scores(tokens)
    torch.testing.assert_close(got, torch.stack(want))
    assert got.shape == (SMALL.num_layers,)
    assert (torch.stack(everywhere) > got + 0.01).any()  # some future key scores higher: the mask matters here
    with pytest.raises(ValueError, match="max_len=12"):
        model.largest_scores(torch.zeros(1, 13, dtype=torch.long))


def test_model_is_causal_and_checks_inputs() -> None:
    torch.manual_seed(0)
    model = TextGPT(SMALL).eval()
    a = torch.randint(0, 256, (2, 12))
    b = a.clone()
    b[:, 7:] = torch.randint(0, 256, (2, 5))
    with torch.no_grad():
        la, wa = model(a, need_weights=True)
        lb, _ = model(b)
    torch.testing.assert_close(la[:, :7], lb[:, :7])  # the future does not leak back
    assert not torch.allclose(la[:, 7:], lb[:, 7:])
    assert wa is not None and wa.shape == (2, 2, 2, 12, 12) and torch.allclose(wa.sum(-1), torch.ones(2, 2, 2, 12))
    with pytest.raises(ValueError, match="max_len=12"):
        model(torch.zeros(1, 13, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[0, 256\); got 0\.\.300"):
        model(torch.tensor([[0, 300]]))


def test_temperature_zero_is_greedy_and_a_temperature_below_zero_is_refused() -> None:
    torch.manual_seed(0)
    model = TextGPT(SMALL).eval()
    ids = encode("ab")
    with torch.no_grad():
        for _ in range(6):  # the likeliest byte each time, by hand
            logits, _ = model(ids[None])
            ids = torch.cat([ids, logits[0, -1].argmax()[None]])
    assert model.generate("ab", 6, torch.Generator().manual_seed(0), temperature=0) == decode(ids)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=rf"temperature must be .*0 \(greedy\).*; got temperature={bad}"):
            model.generate("ab", 1, torch.Generator(), temperature=bad)


def test_windows_and_probes_too_short_get_a_clear_error() -> None:
    torch.manual_seed(0)
    model = TextGPT(SMALL).eval()
    data = torch.randint(0, 256, (40,))
    scores = text_head_scores(model, probe_texts(data, 3, 5))  # the shortest probe: 5 bytes, twice
    assert all(bool(torch.isfinite(v).all()) for v in scores.values())
    with pytest.raises(ValueError, match=r"texts of at least 5 bytes, each written twice.*got shape \(3, 8\)"):
        text_head_scores(model, probe_texts(data, 3, 4))
    with pytest.raises(ValueError, match=r"got shape \(3, 11\)"):
        text_head_scores(model, probe_texts(data, 3, 6)[:, :11])
    assert spaced_windows(data, 4, 39).shape == (4, 39)
    with pytest.raises(ValueError, match=r"windows of 40 bytes need at least 41 bytes of data; got 40"):
        spaced_windows(data, 4, 40)
    with pytest.raises(ValueError, match=r"windows of 50 bytes need at least 51 bytes of data; got 40"):
        probe_texts(data, 3, 50)


def test_ablating_every_head_leaves_no_attention() -> None:
    """ablate_heads's hook on out_proj works on this model: all heads off = the attention branch gone."""
    torch.manual_seed(0)
    model = TextGPT(SMALL).eval()
    tokens = torch.randint(0, 256, (1, 12))
    with torch.no_grad(), ablate_heads(model.attentions, torch.zeros(2, 2)):
        off, _ = model(tokens)
        for block in model.blocks:
            block.attn.out_proj.weight.zero_()
        zeroed, _ = model(tokens)
    torch.testing.assert_close(off, zeroed)


def test_float16_checkpoint_round_trip(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = TextGPT(SMALL).eval()
    model.save(tmp_path / "m.safetensors")
    back = TextGPT.load(tmp_path / "m.safetensors")
    assert back.cfg == SMALL
    for (name, p), q in zip(model.state_dict().items(), back.state_dict().values(), strict=True):
        torch.testing.assert_close(q, p.half().float(), rtol=0, atol=0, msg=name)


# the committed artifacts


def test_log_records_the_committed_corpus_and_sizes() -> None:
    log = read_text_log()
    raw = data_file("course_text.txt").read_bytes()
    assert log["corpus"]["sha256"] == hashlib.sha256(raw).hexdigest() and log["corpus"]["bytes"] == len(raw)
    assert "CC BY 4.0" in log["corpus"]["licence"]
    assert corpus_bytes().tolist()[:50] == list(raw[:50])
    sizes = [len(artifact(n).read_bytes()) for n in (TEXT_CHECKPOINT, TEXT_LOG)]
    assert sum(sizes) <= 2_000_000, sizes
    assert log["checkpoint_bytes"] == sizes[0]
    assert TextConfig(**log["config"]) == load_text_model().cfg


def test_checkpoint_reproduces_the_logged_val_loss() -> None:
    log = read_text_log()
    _, val = train_text.split(corpus_bytes())
    windows = train_text.eval_windows(val)
    with torch.no_grad():
        loss = text_loss(load_text_model(), windows).mean().item()
    assert round(loss, 5) == pytest.approx(log["float16"]["val_loss_checkpoint"], abs=2e-5)
    # the float16 file costs little: the float32 model's loss, logged at the end of training, is close
    assert abs(loss - log["float16"]["val_loss_float32"]) < 0.01
    assert log["snapshots"][-1]["val_loss"] == log["float16"]["val_loss_float32"]


def test_checkpoint_reproduces_the_last_snapshot() -> None:
    log = read_text_log()
    _, val = train_text.split(corpus_bytes())
    scores = text_head_scores(load_text_model(), train_text.probe(val))
    last = log["snapshots"][-1]
    for key in ("previous", "prefix matching", "first token"):
        torch.testing.assert_close(scores[key], torch.tensor(last[key.replace(" ", "_")]), atol=0.01, rtol=0)
    assert abs(float(scores["loss second copy"]) - last["loss_second_copy"]) < 0.01


def test_training_script_reproduces_the_logged_first_steps() -> None:
    """`make train-text` reproducibility without running it whole: its first steps give the logged losses."""
    log = read_text_log()
    steps = 4
    got = train_text.train(None, steps=log["steps"], seed=log["seed"], stop_after=steps)["train_loss"]
    # Equal on the machine that trained it; another CPU's kernels may sum in another order, so allow a little
    # more than the log's rounding (a changed seed, learning rate or batch moves the losses by far more).
    torch.testing.assert_close(torch.tensor(got), torch.tensor(log["train_loss"][:steps]), atol=5e-4, rtol=0)
    assert len(log["train_loss"]) == log["steps"]


def test_docstring_examples_run() -> None:
    import doctest

    from lessons_src.lab import text_model

    torch.manual_seed(0)
    result = doctest.testmod(text_model, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted >= 4 and result.failed == 0


def test_the_page_export_refuses_a_model_with_qk_norm(monkeypatch: pytest.MonkeyPatch) -> None:
    """The live page's script has no QK-norm: exporting such a model must fail, not drop the norm's weights."""
    from lessons_src.lab import text_model_int8

    monkeypatch.setattr(text_model_int8, "load_text_model", lambda: TextGPT(replace(SMALL, qk_norm=True)))
    text_model_int8.export.cache_clear()
    try:
        with pytest.raises(ValueError, match="qk_norm=True"):
            text_model_int8.export()
    finally:
        text_model_int8.export.cache_clear()
