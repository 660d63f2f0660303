"""lessons_src.lab.batching: many prompts in one batch, through the text model's cached decode.

Each row of a left-padded batch equals its prompt decoded alone by full passes (tokens, and logits to float32's
tolerance; float64 to 1e-10); each named mistake fails where it can; chunked prefill equals one prefill; packed
documents equal each document alone, and positions that do not restart fail.
"""

from __future__ import annotations

import pytest
import torch
from qwen3_like import Qwen3Like, tiny_qwen3

from lessons_src.lab.batching import (
    MISTAKES,
    generate_alone,
    generate_batch,
    left_pad,
    pack,
    packed_documents,
    packed_positions,
    padded_positions,
)
from lessons_src.lab.text_model import TextConfig, TextGPT, encode, load_text_model
from lessons_src.masks import causal, key_mask, same_document
from lessons_src.mechanisms import NoPETemperature

PROMPTS = ("Attention is", "A cache keeps the keys of", "Heads")
N = 6  # tokens decoded per row


@pytest.fixture(scope="module")
def model() -> TextGPT:
    return load_text_model()


def _prompts() -> list[torch.Tensor]:
    return [encode(p) for p in PROMPTS]


def _alone(model: TextGPT, n: int = N) -> tuple[torch.Tensor, torch.Tensor]:
    runs = [generate_alone(model, p, n) for p in _prompts()]
    return torch.cat([r.tokens for r in runs]), torch.cat([r.logits for r in runs])


@pytest.fixture(scope="module")
def alone(model: TextGPT) -> tuple[torch.Tensor, torch.Tensor]:
    """Each prompt decoded alone by full passes: ``N`` tokens ``(B, N)`` and their logits ``(B, N, V)``."""
    return _alone(model)


def test_the_cached_decode_equals_the_full_pass(model: TextGPT) -> None:
    """Prefill, then one token per call: the logits of every position are the full pass's, to the last of the
    128-byte context; the cache refuses to go past it."""
    tokens = encode("Multi-head attention splits the model width into heads, each of which attends on its own. " * 2)
    tokens = tokens[: model.cfg.max_len][None]  # (1, 128)
    with torch.no_grad():
        full, _ = model(tokens)
        caches = model.make_caches(1)
        steps = [model(tokens[:, :100], caches=caches)[0]]
        steps += [model(tokens[:, t : t + 1], caches=caches)[0] for t in range(100, 128)]
        torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=2e-5, rtol=1e-5)
        with pytest.raises(ValueError, match=r"after 128 cached must be in 1..max_len=128"):
            model(tokens[:, :1], caches=caches)
    with pytest.raises(ValueError, match=r"max_len=129 is past the trained context of 128"):
        model.make_caches(1, 129)


def test_a_left_padded_batch_equals_each_prompt_alone(model: TextGPT, alone) -> None:  # type: ignore[no-untyped-def]
    tokens, logits = alone
    got = generate_batch(model, _prompts(), N)
    assert torch.equal(got.tokens, tokens)
    torch.testing.assert_close(got.logits, logits, atol=5e-5, rtol=1e-5)


def test_in_float64_to_1e_10(model: TextGPT) -> None:
    double = TextGPT(model.cfg).eval()
    double.load_state_dict(model.state_dict())
    double.double()
    tokens, logits = _alone(double, 3)
    got = generate_batch(double, _prompts(), 3)
    assert torch.equal(got.tokens, tokens)
    torch.testing.assert_close(got.logits, logits, atol=1e-10, rtol=0)


def test_dropping_the_padding_mask_after_the_prefill_fails(model: TextGPT, alone) -> None:  # type: ignore[no-untyped-def]
    """The padded rows attend to their padding slots from the first decoded token on; the full row is unharmed."""
    _, logits = alone
    got = generate_batch(model, _prompts(), N, mistake="mask dropped after the prefill")
    wrong = (got.logits - logits).abs().amax(dim=(1, 2))  # (B,)
    assert wrong[1] < 1e-4 and wrong[0] > 1.0 and wrong[2] > 1.0, wrong
    assert torch.equal(got.logits[:, 0], generate_batch(model, _prompts(), 1).logits[:, 0])  # the prefill was right


def test_positions_from_the_padding_change_nothing_under_rope_alone(model: TextGPT, alone) -> None:  # type: ignore[no-untyped-def]
    """RoPE's scores depend on the distance between a query and a key only, so shifting a whole row's positions
    by its padding changes no score: on this model the mistake is invisible (to rounding)."""
    _, logits = alone
    got = generate_batch(model, _prompts(), N, mistake="positions from the padding")
    torch.testing.assert_close(got.logits, logits, atol=5e-5, rtol=1e-5)


def _with_temperature(layer: int) -> TextGPT:
    """A text model whose ``layer`` is a NoPE layer with Llama 4's temperature: its queries scaled by their
    absolute position (random weights: what matters is that a position means something absolute)."""
    torch.manual_seed(0)
    cfg = TextConfig(d_model=32, num_heads=2, num_layers=2, max_len=32, d_ff=64)
    model = TextGPT(cfg).eval()
    model.blocks[layer].attn.rope = NoPETemperature(floor_scale=2, attn_scale=1.0)
    return model


def test_positions_from_the_padding_fail_where_a_position_is_absolute() -> None:
    model = _with_temperature(1)
    prompts = [encode("ab"), encode("attention"), encode("key")]
    runs = [generate_alone(model, p, 4) for p in prompts]
    logits = torch.cat([r.logits for r in runs])
    right = generate_batch(model, prompts, 4)
    torch.testing.assert_close(right.logits, logits, atol=5e-5, rtol=1e-5)
    wrong = generate_batch(model, prompts, 4, mistake="positions from the padding")
    off = (wrong.logits - logits).abs().amax(dim=(1, 2))  # (B,)
    assert off[1] < 1e-4 and off[0] > 1e-2 and off[2] > 1e-2, off  # the longest row has no padding to count


@pytest.mark.parametrize("chunk", [4, 5, 30], ids=["C divides T", "C does not", "C above T"])
def test_chunked_prefill_equals_one_prefill(model: TextGPT, chunk: int) -> None:
    prompts = [encode("Attention is"), encode("A cache keeps the keys of it")]  # left padded to T = 28
    assert len(prompts[1]) == 28
    one = generate_batch(model, prompts, 3)
    got = generate_batch(model, prompts, 3, chunk=chunk)
    assert torch.equal(got.tokens, one.tokens)
    torch.testing.assert_close(got.logits, one.logits, atol=5e-5, rtol=1e-5)


def test_packed_documents_equal_each_document_alone(model: TextGPT) -> None:
    docs = [encode("Attention is"), encode("Heads"), encode("A cache keeps the keys")]
    tokens, cu = pack(docs)
    ids, pos = packed_documents(cu), packed_positions(cu)
    with torch.no_grad():
        alone = torch.cat([model(d[None])[0] for d in docs], dim=1)  # (1, N, V)
        packed, _ = model(tokens, positions=pos[None], attn_mask=same_document(ids))
        torch.testing.assert_close(packed, alone, atol=5e-5, rtol=1e-5)
        leaking, _ = model(tokens, positions=pos[None])  # no document mask: the later documents see the earlier
        counted, _ = model(tokens, attn_mask=same_document(ids))  # positions that do not restart
    first = slice(0, len(docs[0]))
    assert (leaking - alone)[:, first].abs().max() < 1e-4 and (leaking - alone).abs().max() > 1.0
    torch.testing.assert_close(counted, alone, atol=5e-5, rtol=1e-5)  # RoPE alone: a shift per document is harmless


def test_packed_positions_that_do_not_restart_fail_where_a_position_is_absolute() -> None:
    model = _with_temperature(0)
    docs = [encode("attention"), encode("ab"), encode("key")]
    tokens, cu = pack(docs)
    ids = packed_documents(cu)
    with torch.no_grad():
        alone = torch.cat([model(d[None])[0] for d in docs], dim=1)
        right, _ = model(tokens, positions=packed_positions(cu)[None], attn_mask=same_document(ids))
        wrong, _ = model(tokens, attn_mask=same_document(ids))
    torch.testing.assert_close(right, alone, atol=5e-5, rtol=1e-5)
    assert (wrong - alone).abs().max() > 1e-2


def test_the_helpers_by_hand() -> None:
    tokens, keep = left_pad([torch.tensor([4, 5]), torch.tensor([6, 7, 8, 9]), torch.tensor([1])], pad_id=3)
    assert tokens.tolist() == [[3, 3, 4, 5], [6, 7, 8, 9], [3, 3, 3, 1]]
    assert padded_positions(keep).tolist() == [[0, 0, 0, 1], [0, 1, 2, 3], [0, 0, 0, 0]]
    tokens, cu = pack([torch.tensor([1, 2]), torch.tensor([3]), torch.tensor([4, 5, 6])])
    assert tokens.tolist() == [[1, 2, 3, 4, 5, 6]] and cu.tolist() == [0, 2, 3, 6]
    assert packed_documents(cu).tolist() == [0, 0, 1, 2, 2, 2]
    assert packed_positions(cu).tolist() == [0, 1, 0, 0, 1, 2]
    assert set(MISTAKES) == {"positions from the padding", "mask dropped after the prefill"}


def test_key_mask_with_causal_hides_each_rows_padding() -> None:
    keep = torch.tensor([[False, True, True], [True, True, True]])
    from lessons_src.masks import mask_tensor

    got = mask_tensor(causal() & key_mask(keep), 2, 3, B=2)[:, 0].int().tolist()
    assert got == [[[0, 1, 0], [0, 1, 1]], [[1, 1, 0], [1, 1, 1]]]


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: left_pad([]), TypeError, r"prompts must be a non-empty list"),
    (lambda: left_pad([torch.tensor([1]), torch.tensor([], dtype=torch.long)]), ValueError, r"prompts\[1\] is empty"),
    (lambda: left_pad([torch.tensor([1.0])]), ValueError, r"prompts\[0\] must have a integer dtype"),
    (lambda: padded_positions(torch.ones(2, 3)), ValueError, r"keep must have a bool dtype"),
    (lambda: packed_positions(torch.tensor([1, 3])), ValueError, r"cu_seqlens must start at 0"),
    (lambda: packed_documents(torch.tensor([0, 2, 2])), ValueError, r"grow by at least 1"),
    (lambda: generate_batch(load_text_model(), [encode("a")], 1, mistake="off by one"), ValueError,
     r"mistake must be one of"),
    (lambda: generate_batch(load_text_model(), [encode("a")], 0), ValueError, r"new_tokens must be at least 1"),
    (lambda: generate_batch(load_text_model(), [encode("a")], 1, chunk=0), ValueError, r"chunk must be at least 1"),
    (lambda: generate_batch(load_text_model(), [encode("a" * 100)], 30), ValueError,
     r"max_len=129 is past the trained context"),
])
def test_bad_input_gets_a_clear_error(call, error, match) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=match):
        call()


# --------------------------------------------------------------------------- against transformers: Qwen3's generate


def test_a_left_padded_batch_is_qwen3s_generate() -> None:
    """A tiny random Qwen3 (two layers, GQA, QK-norm) decodes a left-padded batch with ``generate``: the input ids
    padded by hand and the ``attention_mask`` passed (``padding_side`` is the tokenizer's, not ``generate``'s).
    The course's batched decoder, on the same weights, chooses the same greedy tokens from the same logits."""
    pytest.importorskip("transformers")
    ref = tiny_qwen3()
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(1, 64, (n,), generator=g) for n in (3, 7, 5)]
    tokens, keep = left_pad(prompts)
    with torch.no_grad():
        theirs = ref.generate(tokens, attention_mask=keep.long(), max_new_tokens=5, do_sample=False,
                              output_logits=True, return_dict_in_generate=True)
    ours = generate_batch(Qwen3Like(ref).eval(), prompts, 5)
    assert torch.equal(ours.tokens, theirs.sequences[:, tokens.shape[1]:])
    torch.testing.assert_close(ours.logits, torch.stack(theirs.logits, dim=1), atol=1e-5, rtol=1e-5)
    dropped = generate_batch(Qwen3Like(ref).eval(), prompts, 5, mistake="mask dropped after the prefill")
    assert (dropped.logits - ours.logits).abs().max() > 1e-2
