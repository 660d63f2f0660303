"""A tiny GPT trained here on the course's own text: bytes in, next byte out.

:class:`TextGPT` is a decoder-only transformer built from this package's parts: each block's attention is a
:class:`~lessons_src.layer.MultiHeadAttention` (its fused QKV projection and ``W_O``), with rotary
position embeddings (:mod:`lessons_src.rope`) applied to the queries and keys between the projection and
:func:`~lessons_src.functional.attention`; pre-LayerNorm residual blocks with a GELU MLP, as in GPT-2 and
nanoGPT, and no learned positions (RoPE carries them).

The tokenizer is UTF-8 itself: a token is a byte, ids 0-255 (:func:`encode`, :func:`decode`). In JavaScript
that is ``new TextEncoder().encode(text)`` and ``new TextDecoder().decode(bytes)``.

The model is trained by ``tools/train/train_text.py`` (``make train-text``) on the committed snapshot of the
course's prose (``lessons_src/lab/data/course_text.txt``, made by ``tools/train/text_corpus.py``); its
float16 checkpoint and its training log, with the attention statistics saved during training, ship in
``lessons_src/lab/artifacts/`` and are read by :func:`load_text_model` and :func:`read_text_log`.

References:
    Su et al., "RoFormer: Enhanced Transformer with Rotary Position Embedding", 2021 (arXiv:2104.09864).
    Radford et al., "Language Models are Unsupervised Multitask Learners" (GPT-2), 2019.
    Olsson et al., "In-context Learning and Induction Heads", Anthropic 2022 (arXiv:2209.11895).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._checks import size
from ..kv_cache import KVCache, LayerCache
from ..layer import MultiHeadAttention
from ..mechanisms import PerHeadRMSNorm, Rotary
from ..rope import apply_rope, rope_cos_sin
from . import artifact, data_file, read_artifact_json, requires_extra
from .heads import first_token_mass, prefix_matching_score, previous_token_score

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from ..masks import MaskLike

__all__ = [
    "CORPUS_FILE",
    "TEXT_CHECKPOINT",
    "TEXT_LOG",
    "TextConfig",
    "TextGPT",
    "corpus_bytes",
    "decode",
    "encode",
    "load_text_model",
    "probe_texts",
    "read_text_log",
    "repeated_text",
    "spaced_windows",
    "split_corpus",
    "text_head_scores",
    "text_loss",
]

TEXT_CHECKPOINT = "text_model.safetensors"
TEXT_LOG = "text_training.json"
CORPUS_FILE = "course_text.txt"


def encode(text: str) -> Tensor:
    """Text to token ids: its UTF-8 bytes, as the browser's ``TextEncoder`` writes them.

    A lone surrogate (``"\\ud800"``, which UTF-8 cannot hold) becomes U+FFFD, bytes ``EF BF BD``, and a
    surrogate pair held as two characters becomes the one character it encodes, as in JavaScript, whose
    strings are UTF-16.

    Example:
        >>> encode("hé").tolist(), encode("a\\ud800").tolist()
        ([104, 195, 169], [97, 239, 191, 189])
    """
    text = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")  # as a JavaScript string
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long)


def decode(ids: Tensor | list[int]) -> str:
    """Token ids back to text; a byte sequence that is not valid UTF-8 shows U+FFFD.

    Example:
        >>> decode([104, 195, 169])
        'hé'
    """
    values = ids.tolist() if isinstance(ids, Tensor) else list(ids)
    bad = [v for v in values if not 0 <= v <= 255]
    if bad:
        raise ValueError(f"token ids are bytes, 0..255; got {bad[:10]}")
    return bytes(values).decode("utf-8", errors="replace")


def corpus_bytes() -> Tensor:
    """The committed corpus as token ids (its UTF-8 bytes). Shapes: returns ``(N,)``."""
    return torch.frombuffer(bytearray(data_file(CORPUS_FILE).read_bytes()), dtype=torch.uint8).long()


@dataclass(frozen=True)
class TextConfig:
    """Shape of a :class:`TextGPT`.

    Attributes:
        vocab_size: token ids (256: bytes).
        d_model: residual stream width ``D``.
        num_heads: heads per layer ``H``.
        num_layers: blocks.
        max_len: longest context ``T``.
        d_ff: MLP hidden width.
        rope_base: RoPE's wavelength base.
        dropout: dropout on each block's two residual branches, in training mode only.
        qk_norm: RMS-normalise each head's queries and keys before RoPE
            (:class:`~lessons_src.mechanisms.PerHeadRMSNorm`, as Qwen3 and Gemma 3 do); off in the committed model.
    """

    vocab_size: int = 256
    d_model: int = 128
    num_heads: int = 4
    num_layers: int = 2
    max_len: int = 128
    d_ff: int = 512
    rope_base: float = 10000.0
    dropout: float = 0.0
    qk_norm: bool = False


class Block(nn.Module):
    """``x = x + W_O(attention(RoPE(q), RoPE(k), v))`` on ``LayerNorm(x)``, then ``x = x + MLP(LayerNorm(x))``.

    The attention is the package's layer with its rotary piece (and QK-norm, if the config has it), so the full
    pass and a cached decode run the same code: with ``cache``, the new tokens' keys and values are appended
    and the queries attend to everything cached.
    """

    def __init__(self, cfg: TextConfig) -> None:
        super().__init__()
        E = cfg.d_model // cfg.num_heads
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = MultiHeadAttention(cfg.d_model, cfg.num_heads, qk_norm=PerHeadRMSNorm(E) if cfg.qk_norm else None,
                                       rope=Rotary(E, base=cfg.rope_base))
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), nn.Linear(cfg.d_ff, cfg.d_model))
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: Tensor, *, need_weights: bool = False, cache: LayerCache | None = None,
                positions: Tensor | None = None, attn_mask: MaskLike = None) -> tuple[Tensor, Tensor | None]:
        """One block on ``x`` ``(B, T, D)``: its output, and with ``need_weights`` the weights ``(B, H, T, S)``."""
        h = self.ln1(x)  # (B, T, D)
        at = None if cache is None or cache.length == 0 else cache.length  # a chunk after cached tokens
        if need_weights:  # "eager": (B, T, D), (B, H, T, S)
            y, weights = self.attn.with_weights(h, is_causal=True, cache=cache, cache_position=at, positions=positions,
                                                attn_mask=attn_mask)
        else:  # the fused kernel; a hook on out_proj ablates heads
            y, weights = self.attn(h, is_causal=True, cache=cache, cache_position=at, positions=positions,
                                   attn_mask=attn_mask), None
        x = x + self.drop(y)
        x = x + self.drop(self.mlp(self.ln2(x)))  # (B, T, D)
        return x, weights

    @property
    def qk_norm(self) -> nn.Module | None:
        """The layer's QK-norm piece, or ``None`` (the committed model has none)."""
        return self.attn.qk_norm

    def queries_keys_values(self, x: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The heads' queries, keys and values of ``LayerNorm(x)``, the queries and keys normed and rotated."""
        q, k, v = self.attn.project_qkv(self.ln1(x))  # (B, H, T, E) each
        if self.qk_norm is not None:
            q, k = self.qk_norm(q, k)  # each head's query and key at RMS 1 (times a learned weight)
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v  # rotated by position


class TextGPT(nn.Module):
    """Byte embeddings, ``num_layers`` :class:`Block` s, a final LayerNorm and an unembedding.

    **Cached decoding.** With ``caches`` (one :class:`~lessons_src.kv_cache.KVCache` per layer,
    :meth:`make_caches`), the call takes the ``T`` tokens that follow the cached ones: a prompt (prefill), a chunk
    of it, or one new token, and returns their logits, equal to the full pass's at those positions. Everything
    stays within the trained context of ``max_len`` positions. For a batch of prompts of different lengths, left
    padded, pass each token's position per row (``positions``, ``(B, T)``, counted from the row's first real
    token) and the real tokens of every key slot (``attn_mask=key_mask(keep)``, ``keep`` ``(B, S)``, cached slots
    included) at every step: :mod:`lessons_src.lab.batching` does this.

    Shapes:
        tokens: ``(B, T)`` ids in ``[0, 256)``, ``T <= max_len``; returns logits ``(B, T, 256)`` and, with
        ``need_weights=True``, weights ``(L, B, H, T, S)`` (``S = T`` without caches, cached + ``T`` with them).

    Example:
        >>> model = TextGPT(TextConfig(d_model=16, num_heads=2, max_len=8, d_ff=32))
        >>> logits, w = model(encode("hello")[None], need_weights=True)
        >>> tuple(logits.shape), tuple(w.shape)
        ((1, 5, 256), (2, 1, 2, 5, 5))

        The same logits from a cache: the prompt, then one token at a time.

        >>> caches = model.make_caches(batch_size=1)
        >>> with torch.no_grad():
        ...     first, _ = model(encode("hel")[None], caches=caches)
        ...     rest = [model(encode(c)[None], caches=caches)[0] for c in "lo"]
        >>> torch.allclose(torch.cat([first, *rest], dim=1), logits, atol=1e-5), caches[0].length
        (True, 5)
    """

    def __init__(self, cfg: TextConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    @property
    def attentions(self) -> list[MultiHeadAttention]:
        """Every layer's attention module (for :func:`lessons_src.lab.heads.ablate_heads`)."""
        return [b.attn for b in self.blocks]  # type: ignore[misc]

    def make_caches(self, batch_size: int, max_len: int | None = None, *, dtype: torch.dtype | None = None,
                    device: torch.device | str | None = None) -> list[KVCache]:
        """One empty :class:`~lessons_src.kv_cache.KVCache` per layer, for ``max_len`` positions (the model's
        context, ``cfg.max_len``, unless fewer are given), in the weights' dtype and device unless given.

        Raises:
            ValueError: if ``max_len`` is above the trained context ``cfg.max_len`` (RoPE was never trained past it).
        """
        max_len = self.cfg.max_len if max_len is None else size("max_len", max_len, hint="positions to keep")
        if max_len > self.cfg.max_len:
            raise ValueError(f"max_len={max_len} is past the trained context of {self.cfg.max_len} positions; use "
                             f"max_len <= {self.cfg.max_len}")
        w = self.unembed.weight
        E = self.cfg.d_model // self.cfg.num_heads
        return [KVCache(size("batch_size", batch_size), self.cfg.num_heads, E, max_len, dtype=dtype or w.dtype,
                        device=device or w.device) for _ in range(self.cfg.num_layers)]

    def _check_tokens(self, tokens: Tensor, cached: int = 0) -> None:
        if not isinstance(tokens, Tensor) or tokens.ndim != 2 or tokens.dtype != torch.long:
            got = (tokens.dtype, tuple(tokens.shape)) if isinstance(tokens, Tensor) else type(tokens).__name__
            raise ValueError(f"tokens must be int64 ids of shape (B, T); got {got}")
        T = tokens.shape[1]
        if not 1 <= T <= self.cfg.max_len - cached:
            held = f" after {cached} cached" if cached else ""
            raise ValueError(f"sequence length T={T}{held} must be in 1..max_len={self.cfg.max_len}"
                             + (f" - {cached}" if cached else ""))
        if tokens.numel() and (tokens.min() < 0 or tokens.max() >= self.cfg.vocab_size):
            low, high = int(tokens.min()), int(tokens.max())
            raise ValueError(f"token ids must be in [0, {self.cfg.vocab_size}); got {low}..{high}")

    def _rotations(self, tokens: Tensor) -> tuple[Tensor, Tensor]:
        """Check the ids; RoPE's cosines and sines for their positions, ``(T, E)`` each."""
        self._check_tokens(tokens)
        E = self.cfg.d_model // self.cfg.num_heads
        return rope_cos_sin(torch.arange(tokens.shape[1], device=tokens.device), E, base=self.cfg.rope_base)  # (T, E)

    @torch.no_grad()
    def largest_scores(self, tokens: Tensor) -> Tensor:
        """Each layer's largest attention logit ``q·k / sqrt(E)`` over every query and the keys it sees.

        Shapes:
            tokens: ``(B, T)``; returns ``(L,)``.

        Example:
            >>> model = TextGPT(TextConfig(d_model=16, num_heads=2, max_len=8, d_ff=32))
            >>> model.largest_scores(encode("hello")[None]).shape
            torch.Size([2])
        """
        cos, sin = self._rotations(tokens)
        T, E = tokens.shape[1], self.cfg.d_model // self.cfg.num_heads
        future = torch.ones(T, T, dtype=torch.bool, device=tokens.device).triu(1)  # (T, T) keys a query cannot see
        x, largest = self.embed(tokens), []  # (B, T, D)
        for block in cast("list[Block]", list(self.blocks)):
            q, k, _ = block.queries_keys_values(x, cos, sin)  # (B, H, T, E)
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(E)  # (B, H, T, T)
            largest.append(scores.masked_fill(future, float("-inf")).amax())
            x, _ = block(x)
        return torch.stack(largest)

    def forward(self, tokens: Tensor, *, need_weights: bool = False, caches: Sequence[LayerCache] | None = None,
                positions: Tensor | None = None, attn_mask: MaskLike = None) -> tuple[Tensor, Tensor | None]:
        """Logits of ``tokens``, after the cached ones if ``caches`` are given.

        Args:
            tokens: ``(B, T)`` byte ids.
            need_weights: also return every layer's attention weights (computed by ``"eager"``).
            caches: one KV cache per layer (:meth:`make_caches`), all of one length; the tokens go after it.
            positions: ``(B, T)``, each token's position in its own row (``None``: ``cached .. cached + T - 1``
                for every row); each below ``max_len``.
            attn_mask: what every layer's queries may see besides the causal rule, over the ``S`` key slots
                (a rule of :mod:`lessons_src.masks` such as ``key_mask(keep)``, or a tensor).

        Raises:
            ValueError: on ids that are not ``(B, T)`` int64 bytes, more positions than the context holds, caches
                that are not one per layer of one length, or positions at or past ``max_len``.
        """
        cached = self._check_caches(caches)
        # with positions, the cache may hold other sequences' keys (a packed step over a page pool): the positions,
        # not the cache's length, are what must stay in the trained context
        self._check_tokens(tokens, cached if positions is None else 0)
        if positions is not None and isinstance(positions, Tensor) and positions.numel() and \
                positions.device.type != "meta" and int(positions.max()) >= self.cfg.max_len:
            raise ValueError(f"positions must be below max_len={self.cfg.max_len}, the trained context; got "
                             f"{int(positions.max())}")
        x = self.embed(tokens)  # (B, T, D)
        weights = []
        for i, block in enumerate(self.blocks):
            x, w = block(x, need_weights=need_weights, cache=None if caches is None else caches[i],
                         positions=positions, attn_mask=attn_mask)
            weights.append(w)
        logits = self.unembed(self.ln_f(x))  # (B, T, V)
        return logits, (torch.stack(weights) if need_weights else None)  # (L, B, H, T, S)

    def _check_caches(self, caches: Sequence[LayerCache] | None) -> int:
        """How many positions the caches hold (0 without them), or an error naming what is wrong with them."""
        if caches is None:
            return 0
        if not isinstance(caches, (list, tuple)) or len(caches) != self.cfg.num_layers or \
                not all(isinstance(c, LayerCache) for c in caches):
            raise ValueError(f"caches must be a list of {self.cfg.num_layers} LayerCache (such as KVCache), one per "
                             f"layer (model.make_caches()); got {type(caches).__name__}")
        lengths = {c.length for c in caches}
        if len(lengths) != 1:
            raise ValueError(f"the caches hold different lengths {sorted(lengths)}: a step failed half way; reset "
                             "them and prefill again")
        return int(lengths.pop())

    @torch.no_grad()
    def generate(self, prompt: str, new_tokens: int, generator: torch.Generator, temperature: float = 1.0) -> str:
        """Write ``new_tokens`` bytes after ``prompt`` (the last ``max_len`` bytes as context).

        Args:
            prompt: the text to continue.
            new_tokens: bytes to write.
            generator: the random numbers of the sampling.
            temperature: the logits are divided by it before the softmax; 0 takes the likeliest byte each
                time (greedy, as the live page does).

        Raises:
            ValueError: if ``temperature`` is negative, infinite or NaN.
        """
        if not 0 <= temperature < math.inf:  # NaN fails both comparisons
            raise ValueError(
                f"temperature must be a finite number, 0 (greedy) or more; got temperature={temperature!r}"
            )
        ids = encode(prompt)
        for _ in range(new_tokens):
            logits, _ = self(ids[-self.cfg.max_len :][None])
            last = logits[0, -1]  # (V,)
            if temperature == 0:
                next_id = last.argmax()[None]
            else:
                next_id = torch.multinomial(torch.softmax(last / temperature, dim=-1), 1, generator=generator)
            ids = torch.cat([ids, next_id])
        return decode(ids)

    def save(
        self, path: str | Path, metadata: dict[str, str] | None = None, dtype: torch.dtype = torch.float16
    ) -> None:
        """Write the weights (as ``dtype``) and the config (JSON metadata) to a safetensors file."""
        with requires_extra("toy"):
            from safetensors.torch import save_file

        meta = {"config": json.dumps(asdict(self.cfg), sort_keys=True), **(metadata or {})}
        state = {k: v.detach().to(dtype).contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(path), metadata=meta)

    @classmethod
    def load(cls, path: str | Path) -> TextGPT:
        """Read a file written by :meth:`save` into a float32 model in eval mode."""
        with requires_extra("toy"):
            from safetensors import safe_open
            from safetensors.torch import load_file

        with safe_open(str(path), "pt") as f:
            meta = f.metadata()
        model = cls(TextConfig(**json.loads(meta["config"])))
        model.load_state_dict({k: v.float() for k, v in load_file(str(path)).items()})
        return model.eval()


def load_text_model(path: str | Path | None = None) -> TextGPT:
    """The committed text model (``make train-text`` regenerates it), or the one at ``path``."""
    if path is not None:
        return TextGPT.load(path)
    with resources.as_file(artifact(TEXT_CHECKPOINT)) as file:
        return TextGPT.load(file)


def read_text_log() -> dict[str, Any]:
    """The committed training log: settings, corpus, losses, samples and the attention snapshots."""
    log: dict[str, Any] = read_artifact_json(TEXT_LOG)
    return log


def text_loss(model: TextGPT, windows: Tensor) -> Tensor:
    """Per-position cross-entropy (nats) of predicting ``windows[:, t + 1]`` from ``windows[:, :t + 1]``.

    Shapes:
        windows: ``(B, T + 1)``; returns ``(B, T)``.
    """
    logits, _ = model(windows[:, :-1])  # (B, T, V)
    loss: Tensor = F.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none")  # (B, T)
    return loss


def split_corpus(data: Tensor, val_fraction: float) -> tuple[Tensor, Tensor]:
    """The training bytes and the validation bytes (the corpus's last ``val_fraction``).

    Shapes:
        data: ``(N,)``; returns ``(N - V,)`` and ``(V,)``.
    """
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1); got {val_fraction!r}")
    cut = int(len(data) * (1 - val_fraction))
    return data[:cut], data[cut:]


def spaced_windows(data: Tensor, count: int, length: int) -> Tensor:
    """``count`` windows of ``length`` bytes at evenly spaced starts (the fixed validation batch).

    Shapes:
        data: ``(N,)``; returns ``(count, length)``.
    """
    return torch.stack([data[s : s + length] for s in _spaced_starts(data, count, length).tolist()])


def probe_texts(data: Tensor, count: int, n: int) -> Tensor:
    """The head-score probe: ``count`` evenly spaced texts of ``n`` bytes, each written twice.

    Shapes:
        data: ``(N,)``; returns ``(count, 2 n)``.
    """
    return repeated_text(data, _spaced_starts(data, count, n), n)


def _spaced_starts(data: Tensor, count: int, length: int) -> Tensor:
    """``count`` evenly spaced starts of windows of ``length`` bytes, the last at ``N - length - 1``."""
    if len(data) <= length:
        raise ValueError(f"windows of {length} bytes need at least {length + 1} bytes of data; got {len(data)}")
    return torch.linspace(0, len(data) - length - 1, count).long()


def repeated_text(data: Tensor, starts: Tensor, n: int) -> Tensor:
    """Windows of ``n`` bytes of text, each followed by the same ``n`` bytes again.

    Shapes:
        data: ``(N,)``; starts: ``(B,)``; returns ``(B, 2 n)``.
    """
    first = torch.stack([data[s : s + n] for s in starts.tolist()])  # (B, n)
    return torch.cat([first, first], dim=1)  # (B, 2n)


@torch.no_grad()
def text_head_scores(model: TextGPT, probe: Tensor) -> dict[str, Tensor]:
    """Per-head scores and repeat losses on ``probe``, ``B`` texts of ``n`` bytes each written twice.

    Returns:
        ``previous`` (weight on the position before), ``prefix matching`` (weight on the byte after the
        earlier occurrence, queries in the second copy), ``first token`` (weight on position 0, queries
        from 8 on), each ``(L, H)``; ``loss first copy`` and ``loss second copy`` (mean nats per byte
        predicted inside each copy, scalars).

    Raises:
        ValueError: unless ``probe`` is ``(B, 2 n)`` with ``n >= 5`` (the first-token score needs a query at
            position 8 or later).
    """
    from_query = 8  # the first-token score reads the queries from here on
    shortest = from_query // 2 + 1
    if probe.ndim != 2 or probe.shape[1] % 2 or probe.shape[1] < 2 * shortest:
        raise ValueError(
            f"probe must be texts of at least {shortest} bytes, each written twice: (B, 2 n) with n >= {shortest}; "
            f"got shape {tuple(probe.shape)}"
        )
    n = probe.shape[1] // 2
    logits, w = model(probe, need_weights=True)  # (B, 2n, V), (L, B, H, 2n, 2n)
    assert w is not None
    loss = F.cross_entropy(logits[:, :-1].transpose(1, 2), probe[:, 1:], reduction="none")  # (B, 2n-1)
    return {
        "previous": previous_token_score(w).mean(1),  # (L, H)
        "prefix matching": prefix_matching_score(w, n).mean(1),  # (L, H)
        "first token": first_token_mass(w, from_query=from_query),  # (L, H)
        "loss first copy": loss[:, : n - 1].mean(),  # predicting bytes 1..n-1 of the first copy
        "loss second copy": loss[:, n:].mean(),  # predicting bytes 1..n-1 of the second copy
    }
