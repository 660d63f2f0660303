"""lessons_src.lab.minilm: the pretrained encoder, run through our attention, matches Hugging Face's BertModel."""

from __future__ import annotations

import os

import pytest
import torch

from lessons_src.lab import minilm
from lessons_src.layer import MultiHeadAttention

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def reference() -> object:
    model = transformers.BertModel.from_pretrained(
        str(minilm.model_dir()), add_pooling_layer=False, attn_implementation="eager", local_files_only=True
    )
    return model.eval()


def test_hidden_states_and_weights_match_transformers(reference: object) -> None:
    model, tok = minilm.load()
    assert all(isinstance(a, MultiHeadAttention) for a in model.attentions)
    _, ids, mask = tok.batch(minilm.PROBE_SENTENCES[:6])
    with torch.no_grad():
        hidden, weights = model(ids, mask)
        ref = reference(input_ids=ids, attention_mask=mask, output_attentions=True)  # type: ignore[operator]
    real = mask.bool()
    torch.testing.assert_close(hidden[real], ref.last_hidden_state[real], atol=1e-5, rtol=0)
    for layer in range(6):
        ours, theirs = weights[layer].transpose(1, 2), ref.attentions[layer].transpose(1, 2)  # (B, T, H, S)
        torch.testing.assert_close(ours[real], theirs[real], atol=1e-5, rtol=0)  # rows of real queries


def test_sentence_embeddings_are_mean_pooled_reference(reference: object) -> None:
    sentences = minilm.PROBE_SENTENCES[:4]
    _, tok = minilm.load()
    _, ids, mask = tok.batch(sentences)
    with torch.no_grad():
        h = reference(input_ids=ids, attention_mask=mask).last_hidden_state  # type: ignore[operator]
    m = mask[..., None].float()
    expected = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1)
    torch.testing.assert_close(minilm.sentence_embeddings(sentences), expected, atol=1e-5, rtol=0)


def test_tokenizer_matches_transformers() -> None:
    ref = transformers.AutoTokenizer.from_pretrained(str(minilm.model_dir()), local_files_only=True)
    _, tok = minilm.load()
    for s in minilm.EXAMPLE_SENTENCES:
        tokens, ids = tok(s)
        assert ids.tolist() == ref(s)["input_ids"]
        assert tokens == ref.convert_ids_to_tokens(ids.tolist())


def test_attention_maps_shape_and_rows() -> None:
    tokens, w = minilm.attention_maps(minilm.EXAMPLE_SENTENCES[0])
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and "it" in tokens
    assert w.shape == (6, 12, len(tokens), len(tokens))
    torch.testing.assert_close(w.sum(-1), torch.ones(6, 12, len(tokens)))


def test_config_is_the_published_shape() -> None:
    model, _ = minilm.load()
    cfg = model.cfg
    assert (cfg.num_layers, cfg.num_heads, cfg.d_model, cfg.head_dim) == (6, 12, 384, 32)


def test_wrong_checksum_is_refused(tmp_path: object) -> None:
    from pathlib import Path

    bad = Path(str(tmp_path)) / "model.safetensors"
    bad.write_bytes(b"not the model")
    with pytest.raises(ValueError, match="SHA-256"):
        minilm.verify_weights(bad)
    minilm.verify_weights(minilm.model_dir() / "model.safetensors")  # the real file passes


def test_bad_inputs_are_refused() -> None:
    model, _ = minilm.load()
    with pytest.raises(ValueError, match="2-D"):
        model(torch.zeros(3, dtype=torch.long))
    with pytest.raises(ValueError, match="max_len=512"):
        model(torch.zeros(1, 513, dtype=torch.long))
    with pytest.raises(ValueError, match="model_type='bert'"):
        minilm.BertConfig.from_dict({"model_type": "gpt2"})
