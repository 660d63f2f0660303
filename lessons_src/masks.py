"""Attention masks, in one convention: PyTorch SDPA's.

A **bool** mask is ``True`` where a query MAY attend to a key. A **float** mask is *added* to the
attention scores (``0`` keeps a key, ``-inf`` removes it). Every function in ``lessons_src`` takes and
returns masks in this convention. ``torch.nn.MultiheadAttention`` uses the opposite polarity for bool
masks (``True`` = blocked); :func:`lessons_src.interop.masks_from_torch` is the one place that translates.

Causal masks are aligned **bottom-right**: with ``T`` queries and ``S`` keys, query ``i`` may see key
``j`` when ``j <= i + S - T``. For ``T == S`` that is the usual lower triangle; for ``T < S`` (new tokens
decoded after ``S - T`` cached ones) the last query sees every key::

    causal_mask(3, 5)         key j ->  0 1 2 3 4
                              query 0   1 1 1 . .
                              query 1   1 1 1 1 .
                              query 2   1 1 1 1 1

``F.scaled_dot_product_attention(..., is_causal=True)`` aligns the triangle top-left instead, which is
wrong for decoding with a cache, so this package never passes ``is_causal=True`` to it when ``T != S``.

A **sliding window** of ``W`` keeps only the last ``W`` positions up to and including the query's own
(``i + S - T - W < j <= i + S - T``), aligned bottom-right like the causal mask; ``sink_tokens=n`` keeps the
first ``n`` keys visible as well (StreamingLLM's attention sinks)::

    causal_mask(5, window=2, sink_tokens=1)   key j ->  0 1 2 3 4
                                        query 0   1 . . . .
                                        query 1   1 1 . . .
                                        query 2   1 1 1 . .
                                        query 3   1 . 1 1 .
                                        query 4   1 . . 1 1

**Chunked attention** (Llama 4) cuts the positions into fixed chunks of ``C`` (``0 .. C-1``, ``C .. 2C-1``,
...) and lets a query see only the keys of its own chunk, causally: ``j // C == p // C`` with ``p = i + S - T``
the query's position. Unlike a window, the number of keys a query sees falls back to 1 at each chunk's
start, and a cache needs only the current chunk::

    causal_mask(5, chunk=2)   key j ->  0 1 2 3 4
                              query 0   1 . . . .
                              query 1   1 1 . . .
                              query 2   . . 1 . .
                              query 3   . . 1 1 .
                              query 4   . . . . 1

**Packed documents** put several sequences in one row of a batch, end to end, as training pipelines pack them;
per-token document ids say which is which, and a query sees only the keys of its own document
(:func:`document_mask`; with ``is_causal``, causally within it). **Prefix-LM** (T5's prefix LM, PaliGemma's
prompt, Gemma 3's image tokens) lets every query see a prefix of ``P`` keys in full, and causally after it
(:func:`prefix_lm_mask`): the prefix attends both ways::

    document_mask(tensor([0, 0, 1, 1, 1])) & causal_mask(5)    prefix_lm_mask(5, prefix=2)
    key j ->  0 1 2 3 4                                          key j ->  0 1 2 3 4
    query 0   1 . . . .                                          query 0   1 1 . . .
    query 1   1 1 . . .                                          query 1   1 1 . . .
    query 2   . . 1 . .                                          query 2   1 1 1 . .
    query 3   . . 1 1 .                                          query 3   1 1 1 1 .
    query 4   . . 1 1 1                                          query 4   1 1 1 1 1

A **draft tree** (speculative decoding) is checked in one pass: ``n`` draft tokens after ``P`` cached ones, each
given by its parent (``-1``: the last cached token). A draft sees the cache, and among the drafts only its
ancestors and itself (:func:`draft_tree`, with :func:`causal`); its position is ``P`` plus its depth
(:func:`tree_positions`), so siblings share one, and a window is measured by positions (:func:`at_positions`)::

    causal() & draft_tree([-1, 0, 0, 1], start=2)    key j ->  0 1 | 2 3 4 5
    (node 0 the root, 1 and 2 its children,           node 0   1 1 | 1 . . .
    3 a child of 1; positions 2, 3, 3, 4)             node 1   1 1 | 1 1 . .
                                                      node 2   1 1 | 1 . 1 .
                                                      node 3   1 1 | 1 1 . 1

**Every rule is written once, as a function of positions** (:class:`MaskRule`): ``rule(b, h, q, kv)`` is
``True`` where the query at position ``q`` of sequence ``b``, head ``h``, may see the key at position ``kv``.
The rules are :func:`causal`, :func:`sliding_window`, :func:`same_chunk`, :func:`same_document`,
:func:`prefix_lm`, :func:`padding`, :func:`key_mask` and :func:`draft_tree`, composed with ``&`` and ``|``
(:func:`and_masks`, :func:`or_masks`). Each consumer turns a rule into what it needs, binding the bottom-right offset
``S - T`` there and nowhere else: a dense bool tensor (:func:`mask_tensor`; ``causal_mask`` and the other builders
below are that, for one rule), or an index-space function for FlexAttention (:func:`mask_mod`,
:func:`lessons_src.flex.block_mask`).
A new mask is one ``MaskRule``: ``attention(q, k, v, attn_mask=rule)`` takes it as it is.

References:
    Raffel et al., "Exploring the Limits of Transfer Learning with a Unified Text-to-Text Transformer", JMLR
    2020 (arXiv:1910.10683), section 3.2.1: the prefix LM's mask.
    Krell et al., "Efficient Sequence Packing without Cross-contamination", 2021 (arXiv:2107.02027): packed
    sequences with a block-diagonal mask.
    Meta, Llama 4 model code (``llama_models/llama4/model.py``): chunked attention on the RoPE layers.
    Beltagy et al., "Longformer: The Long-Document Transformer", 2020 (arXiv:2004.05150), sliding windows.
    Xiao et al., "Efficient Streaming Language Models with Attention Sinks", ICLR 2024 (arXiv:2309.17453).
    Miao et al., "SpecInfer: Accelerating Large Language Model Serving with Tree-based Speculative Inference and
    Verification", ASPLOS 2024 (arXiv:2305.09781): a token tree verified in one pass with a tree mask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch
from torch import Tensor

from ._checks import flag, size

BlockKind = Literal["skip", "full", "partial"]  # how a tiled loop treats a tile

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    MaskFn = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]  # (b, h, q, kv) -> bool, broadcasting
    Check = Callable[[int, int, int, torch.device], None]  # (B, T, S, device): raise if the rule cannot apply

__all__ = [
    "CausalTiles",
    "MaskRule",
    "PreparedMask",
    "and_masks",
    "at_positions",
    "by_distance",
    "causal",
    "causal_mask",
    "check_chunk",
    "check_mask",
    "check_window",
    "chunk_mask",
    "combine_masks",
    "document_mask",
    "draft_tree",
    "key_mask",
    "mask_mod",
    "mask_tensor",
    "or_masks",
    "padding",
    "padding_mask",
    "prefix_lm",
    "prefix_lm_mask",
    "prepare_mask",
    "same_chunk",
    "same_document",
    "sliding_window",
    "tree_ancestors",
    "tree_positions",
]


# --------------------------------------------------------------------------- the rules, each written once


class MaskRule:
    """A mask as a function of positions: ``rule(b, h, q, kv)`` is ``True`` where the query may attend.

    ``b``, ``h``, ``q`` and ``kv`` are integer tensors that broadcast together (the sequence, the head, the
    query's *position* and the key's position); the function uses only tensor operations on them, no Python
    branch on their values, so the same rule runs on a grid of indices (:func:`mask_tensor`) and inside
    FlexAttention (:func:`mask_mod`). Arguments are checked when the rule is built; what depends on the sizes
    (a length no longer than ``S``, one id per key) is checked by ``checks`` when a consumer applies it.

    A fast path may recognise a rule by what it declares, never by its name: ``causal`` (the rule is exactly the
    causal mask, narrowed to the last ``window`` positions when that is set: SDPA's causal flag, tiles skipped
    whole) and ``widens_causal`` (it lets a query see keys the causal mask hides, as a prefix LM does, so it
    cannot be combined with a causal flag). ``parts`` are the rules an ``&`` joined.

    Args:
        name: how the rule prints, ``"causal & same_chunk(4)"``.
        fn: ``(b, h, q, kv) -> bool tensor``.
        checks: functions ``(B, T, S, device) -> None`` that raise when the rule cannot apply to those sizes.
        causal, window, widens_causal: what a fast path may read (see above); a rule of your own leaves them.

    Example:
        >>> every_other = MaskRule("every_other", lambda b, h, q, kv: (q - kv) % 2 == 0) & causal()
        >>> mask_tensor(every_other, 3)[0, 0].int().tolist()
        [[1, 0, 0], [0, 1, 0], [1, 0, 1]]
    """

    __slots__ = ("causal", "checks", "fn", "name", "parts", "widens_causal", "window")

    def __init__(self, name: str, fn: MaskFn, checks: tuple[Check, ...] = (), *, causal: bool = False,
                 window: int | None = None, widens_causal: bool = False,
                 parts: tuple[MaskRule, ...] | None = None) -> None:
        if not callable(fn):
            raise TypeError(f"fn must be a function (b, h, q, kv) -> bool tensor; got {type(fn).__name__}")
        self.name, self.fn, self.checks = name, fn, tuple(checks)
        self.causal, self.window, self.widens_causal = causal, window, widens_causal
        self.parts = (self,) if parts is None else parts

    def __call__(self, b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        return self.fn(b, h, q, kv)

    def __and__(self, other: MaskRule) -> MaskRule:
        return and_masks(self, other)

    def __or__(self, other: MaskRule) -> MaskRule:
        return or_masks(self, other)

    def check(self, B: int, T: int, S: int, device: torch.device | str | None = None) -> None:
        """Raise a ``ValueError`` naming the argument if the rule cannot apply to ``B`` sequences, ``T`` queries
        and ``S`` keys on ``device``."""
        for check in self.checks:
            check(B, T, S, torch.device("cpu") if device is None else torch.device(device))

    def __repr__(self) -> str:
        return self.name


if TYPE_CHECKING:
    MaskLike = Tensor | MaskRule | Sequence[Tensor | MaskRule] | None  # what attention(attn_mask=...) takes


def _combine(op: str, rules: tuple[MaskRule, ...]) -> MaskRule:
    bad = [type(r).__name__ for r in rules if not isinstance(r, MaskRule)]
    if not rules or bad:
        raise TypeError(f"{'and' if op == '&' else 'or'}_masks takes one or more MaskRule; got {bad or 'none'}")

    def combined(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        out = rules[0](b, h, q, kv)
        for rule in rules[1:]:
            out = out & rule(b, h, q, kv) if op == "&" else out | rule(b, h, q, kv)
        return out

    name = f" {op} ".join(r.name if " " not in r.name else f"({r.name})" for r in rules)
    parts = tuple(p for r in rules for p in r.parts) if op == "&" else None  # an | is one opaque part
    return MaskRule(name, combined, tuple(c for r in rules for c in r.checks), parts=parts)


def and_masks(*rules: MaskRule) -> MaskRule:
    """A key is kept where every rule keeps it (``rule_a & rule_b`` is the same)."""
    return _combine("&", rules)


def or_masks(*rules: MaskRule) -> MaskRule:
    """A key is kept where any rule keeps it (``rule_a | rule_b`` is the same)."""
    return _combine("|", rules)


def causal() -> MaskRule:
    """Each query sees the keys at or before its position: ``kv <= q``.

    With positions, not indices, this is bottom-right for every ``T`` and ``S``: the consumer puts query ``i``
    at ``i + S - T``.
    """
    return MaskRule("causal", lambda b, h, q, kv: kv <= q, causal=True)


def sliding_window(window: int, *, sink_tokens: int = 0) -> MaskRule:
    """Causal, and only the last ``window`` positions up to the query's own, plus the first ``sink_tokens`` keys.

    ``q - window < kv <= q``, or ``kv < sink_tokens`` (StreamingLLM's kept first tokens), causally.
    """
    w = check_window(window)
    if w is None:
        raise TypeError("sliding_window needs a window, an int of at least 1; got None")
    n = size("sink_tokens", sink_tokens, 0)
    name = f"sliding_window({w})" if n == 0 else f"sliding_window({w}, sink_tokens={n})"
    return MaskRule(name, lambda b, h, q, kv: (kv <= q) & ((kv > q - w) | (kv < n)), causal=n == 0,
                    window=w if n == 0 else None)


def same_chunk(chunk: int) -> MaskRule:
    """Query and key in the same chunk of ``chunk`` positions: ``kv // chunk == q // chunk`` (not causal by itself;
    Llama 4's chunked attention is ``causal() & same_chunk(chunk)``)."""
    c = check_chunk(chunk)
    if c is None:
        raise TypeError("chunk must be an int of at least 1; got None")
    return MaskRule(f"same_chunk({c})", lambda b, h, q, kv: kv // c == q // c)


def _on_device(name: str, t: Tensor) -> Check:
    def check(B: int, T: int, S: int, device: torch.device) -> None:
        if t.device.type != device.type or (device.index is not None and t.device != device):
            raise ValueError(f"{name} are on {t.device} but the mask is built on {device}; move them there")
    return check


def _per_sequence(name: str, rows: int) -> Check:
    def check(B: int, T: int, S: int, device: torch.device) -> None:
        if rows not in (1, B):
            raise ValueError(f"{name} has {rows} rows for a batch of B={B}; give one per sequence or one for all")
    return check


def same_document(documents: Tensor) -> MaskRule:
    """Query and key in the same packed document: ``ids[b, kv] == ids[b, q]`` (not causal by itself).

    ``documents`` holds the integer id of each of the ``S`` positions, ``(S,)`` or ``(B, S)``; the queries are
    the last ``T`` of them, so ``T`` may not exceed ``S``.
    """
    if not isinstance(documents, Tensor):
        raise TypeError(f"documents must be a tensor of integer document ids; got {type(documents).__name__}")
    if documents.dtype == torch.bool or documents.dtype.is_floating_point or documents.dtype.is_complex:
        raise TypeError(f"documents must hold integer document ids; got dtype {documents.dtype}")
    if documents.ndim not in (1, 2) or documents.shape[-1] == 0:
        raise ValueError(f"documents must be (S,) or (B, S), one id per position, S >= 1; got shape "
                         f"{tuple(documents.shape)}")
    ids = documents if documents.ndim == 2 else documents[None]  # (B or 1, S)
    n = ids.shape[-1]

    def covers(B: int, T: int, S: int, device: torch.device) -> None:
        if n != S:
            raise ValueError(f"documents give {n} positions but there are S={S} keys: one id per key position")
        if not 1 <= T <= S:
            raise ValueError(f"T={T} queries must be the last of the S={S} positions the document ids cover: "
                             f"1 <= T <= {S}")

    def rule(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        row = b if ids.shape[0] > 1 else torch.zeros_like(b)
        return ids[row, kv] == ids[row, q]

    return MaskRule("same_document", rule, (covers, _per_sequence("documents", ids.shape[0]),
                                            _on_device("documents", ids)))


def _int_tensor(lengths: Tensor | Sequence[int], device: torch.device | str | None) -> Tensor | None:
    """``lengths`` as an integer tensor (a tensor stays on its device, a list goes to ``device``), or ``None``."""
    t = lengths if isinstance(lengths, Tensor) else torch.as_tensor(lengths, device=device)
    return None if t.dtype == torch.bool or t.dtype.is_floating_point or t.dtype.is_complex else t


def _in_range(name: str, lengths: Tensor, low: int) -> Check:
    """Each length from ``low`` to ``S``; values are not read on meta."""
    def check(B: int, T: int, S: int, device: torch.device) -> None:
        if lengths.device.type != "meta" and bool(((lengths < low) | (lengths > S)).any()):
            bad = [int(n) for n in lengths if not low <= int(n) <= S]
            raise ValueError(f"every {name} must be between {low} and S={S}; got {bad}")
    return check


def prefix_lm(prefix: int | Tensor | Sequence[int], *, device: torch.device | str | None = None) -> MaskRule:
    """A prefix LM: causal, and every query sees the first ``prefix`` keys (``kv <= q`` or ``kv < prefix[b]``).

    ``prefix``: one length for the batch or one per sequence, ``0 .. S``; the queries are the last ``T <= S``
    positions. Lengths given as ints go wherever the mask is built (``device`` only says where to keep them
    until then); a tensor must already be on the mask's device.
    """
    if not isinstance(prefix, Tensor) and hasattr(prefix, "__index__") and not isinstance(prefix, bool):
        P = size("prefix", prefix, 0)  # one int for the batch: no tensor, no device

        def no_longer(B: int, T: int, S: int, device: torch.device) -> None:
            if P > S:
                raise ValueError(f"prefix={P} is longer than the S={S} keys; use 0 .. {S}")

        return MaskRule("prefix_lm", lambda b, h, q, kv: (kv <= q) | (kv < P), (_queries_in_keys, no_longer),
                        widens_causal=True)
    t = _int_tensor(prefix, device)  # type: ignore[arg-type]
    if t is None or t.ndim != 1 or t.numel() == 0:
        raise TypeError(f"prefix must be an int, or a 1-D list of ints (one per sequence); got {prefix!r}")
    lengths = _per_row(t, given=isinstance(prefix, Tensor))

    def rule(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        return (kv <= q) | (kv < lengths(b, kv))

    checks: tuple[Check, ...] = (_queries_in_keys, _in_range("prefix length", t, 0), _per_sequence("prefix", t.numel()))
    if isinstance(prefix, Tensor):
        checks += (_on_device("prefix lengths", t),)
    return MaskRule("prefix_lm", rule, checks, widens_causal=True)


def _queries_in_keys(B: int, T: int, S: int, device: torch.device) -> None:
    if not 1 <= T <= S:
        raise ValueError(f"a prefix LM needs 1 <= T <= S (the queries are the last T of S positions); "
                         f"got T={T}, S={S}")


def _per_row(t: Tensor, *, given: bool) -> Callable[[Tensor, Tensor], Tensor]:
    """``t[b]`` (one length for all rows when ``t`` has one), on ``kv``'s device when the package made ``t`` from
    ints; a tensor the caller gave is used where it is (its rule checks the device)."""
    def lengths(b: Tensor, kv: Tensor) -> Tensor:
        on = t if given else t.to(kv.device)
        return on[b if t.numel() > 1 else torch.zeros_like(b)]
    return lengths


def padding(lengths: Tensor | Sequence[int], *, device: torch.device | str | None = None) -> MaskRule:
    """Sequence ``b`` keeps only its first ``lengths[b]`` keys: ``kv < lengths[b]`` (each from 1 to ``S``).

    Lengths given as a list go wherever the mask is built (``device`` only says where to keep them until then); a
    tensor must already be on the mask's device.
    """
    t = _int_tensor(lengths, device)
    if t is None:
        raise TypeError(f"lengths must be integers; got {lengths!r}")
    if t.ndim != 1 or t.numel() == 0:
        raise ValueError(f"lengths must be a non-empty 1-D list of sequence lengths; got shape {tuple(t.shape)}")
    row = _per_row(t, given=isinstance(lengths, Tensor))
    checks: tuple[Check, ...] = (_in_range("length", t, 1), _per_sequence("lengths", t.numel()))
    if isinstance(lengths, Tensor):
        checks += (_on_device("lengths", t),)
    return MaskRule("padding", lambda b, h, q, kv: kv < row(b, kv), checks)


def key_mask(keep: Tensor) -> MaskRule:
    """Row ``b`` sees key ``kv`` only where ``keep[b, kv]``: its real tokens, wherever the padding is.

    ``keep`` is Hugging Face's ``attention_mask``: ``True`` (or 1) for a real token, ``False`` (or 0) for padding,
    one entry per key position, cached ones included, ``(S,)`` or ``(B, S)``. A left-padded batch, whose rows end
    together, needs it with the causal rule at every step, the prompt's and every decoded token's (:func:`padding`
    is the right-padded case, by lengths). Not causal by itself.
    """
    if not isinstance(keep, Tensor):
        raise TypeError(f"keep must be a tensor, True (or 1) for each real token; got {type(keep).__name__}")
    if keep.dtype.is_floating_point or keep.dtype.is_complex:
        raise TypeError(f"keep must be bool (or 0/1 integers), True for each real token; got dtype {keep.dtype}")
    if keep.ndim not in (1, 2) or keep.shape[-1] == 0:
        raise ValueError(f"keep must be (S,) or (B, S), one entry per key position, S >= 1; got shape "
                         f"{tuple(keep.shape)}")
    if keep.dtype != torch.bool and keep.device.type != "meta" and bool(((keep != 0) & (keep != 1)).any()):
        raise ValueError("keep must hold 0 (padding) and 1 (a real token) only; got other values")
    rows = (keep if keep.ndim == 2 else keep[None]).bool()  # (B or 1, S)
    n = rows.shape[-1]

    def covers(B: int, T: int, S: int, device: torch.device) -> None:
        if n != S:
            raise ValueError(f"keep gives {n} positions but there are S={S} keys: one entry per key position, the "
                             "cached ones included")

    def rule(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        return rows[b if rows.shape[0] > 1 else torch.zeros_like(b), kv]

    return MaskRule("key_mask", rule, (covers, _per_sequence("keep", rows.shape[0]), _on_device("keep", rows)))


def _parent_list(parents: object) -> list[int]:
    """``parents`` as a list of ints, each ``-1`` (a root) or an earlier node's index; an error naming it otherwise."""
    if isinstance(parents, Tensor):
        if parents.dtype == torch.bool or parents.dtype.is_floating_point or parents.dtype.is_complex:
            raise TypeError(f"parents must hold integer node indices; got dtype {parents.dtype}")
        if parents.ndim != 1:
            raise ValueError(f"parents must be 1-D, one entry per draft node; got shape {tuple(parents.shape)}")
        items: list[object] = parents.tolist()
    elif isinstance(parents, list | tuple):
        items = list(parents)
    else:
        raise TypeError(f"parents must be a list of ints (-1 for a root, else an earlier node's index); got "
                        f"{type(parents).__name__}")
    if not items:
        raise ValueError("parents must name at least one node; got an empty list")
    out = []
    for i, p in enumerate(items):
        if isinstance(p, bool) or not hasattr(p, "__index__"):
            raise TypeError(f"parents[{i}] must be an int; got {p!r} of type {type(p).__name__}")
        p = int(p.__index__())
        if not -1 <= p < i:
            raise ValueError(f"parents[{i}]={p}: each node's parent must come before it (-1 for a root, else one of "
                             f"0..{i - 1}), so that an ancestor always precedes its descendants")
        out.append(p)
    return out


def tree_ancestors(parents: Tensor | Sequence[int], *, device: torch.device | str | None = None) -> Tensor:
    """Which draft nodes each node may see: ``out[i, a]`` is ``True`` when ``a`` is ``i`` or one of its ancestors.

    ``parents[i]`` is the index of node ``i``'s parent, ``-1`` for a root (a node whose parent is the last cached
    token); a parent always comes before its child, so row ``i`` is its parent's row plus ``i`` itself. The table is
    built on ``device`` (``None``: the default device).

    Shapes:
        parents: ``(n,)``; output: ``(n, n)`` bool, lower triangular.

    Raises:
        TypeError: if ``parents`` is not a list or tensor of ints.
        ValueError: if it is empty, or a parent is not ``-1`` or an earlier node.

    Example:
        >>> tree_ancestors([-1, 0, 0, 1]).int().tolist()  # 1 and 2 are siblings; 3 is 1's child
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]]
    """
    ps = _parent_list(parents)
    n = len(ps)
    seen = torch.eye(n, dtype=torch.bool, device=device)  # (n, n): each node sees itself
    for i, p in enumerate(ps):
        if p >= 0:
            seen[i] |= seen[p]  # and whatever its parent sees
    return seen


def tree_positions(parents: Tensor | Sequence[int], start: int, *, device: torch.device | str | None = None) -> Tensor:
    """Each draft node's position: ``start`` plus its depth (a root is at ``start``, its children at ``start + 1``).

    Siblings share a position: they are alternatives for the same place in the text. Positions by index
    (``start + i``) would put node ``i`` ``i`` places after the cache, wherever it sits in the tree. Made on
    ``device`` (``None``: the default device).

    Shapes:
        parents: ``(n,)``; output: ``(n,)`` int64.

    Raises:
        TypeError, ValueError: as :func:`tree_ancestors`, or naming ``start`` if it is not an int of at least 0.

    Example:
        >>> tree_positions([-1, 0, 0, 1], start=10).tolist()
        [10, 11, 11, 12]
    """
    start = size("start", start, 0, hint="positions already cached")
    depth = tree_ancestors(parents, device=device).sum(dim=1) - 1  # (n,): ancestors other than itself
    return depth + start


def draft_tree(parents: Tensor | Sequence[int], *, start: int) -> MaskRule:
    """A tree of draft tokens after ``start`` cached ones: a draft node sees every cached key, and among the drafts
    only its ancestors and itself.

    The nodes sit at key slots ``start .. start + n - 1`` in the order of ``parents`` (a parent before its
    children). A query at slot ``q >= start`` is node ``q - start`` and sees key ``kv`` when ``kv < start`` or node
    ``kv - start`` is an ancestor of it (:func:`tree_ancestors`). Compose it with :func:`causal` (or pass
    ``is_causal=True``): queries before ``start`` then see the prefix causally, and the draft queries are unchanged,
    since an ancestor always precedes its node. Give the nodes :func:`tree_positions` as their positions. A chain
    (``parents = [-1, 0, 1, ...]``) is the causal mask.

    Raises:
        TypeError, ValueError: as :func:`tree_ancestors`, or naming ``start``; when applied, unless
            ``S == start + n``.

    Example:
        >>> rule = causal() & draft_tree([-1, 0, 0], start=2)  # 2 cached tokens, a root and two children
        >>> mask_tensor(rule, 3, 5)[0, 0].int().tolist()
        [[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 0, 1]]
    """
    seen = tree_ancestors(parents, device="cpu")  # (n, n), moved where the mask is built
    n = seen.shape[0]
    start = size("start", start, 0, hint="positions already cached")

    def covers(B: int, T: int, S: int, device: torch.device) -> None:
        if start + n != S:
            raise ValueError(f"draft_tree(start={start}) puts its {n} nodes at key slots {start}..{start + n - 1}, so "
                             f"S must be {start + n}; got S={S}")

    def rule(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        on = seen.to(kv.device)
        node, other = (q - start).clamp(0, n - 1), (kv - start).clamp(0, n - 1)  # slots outside the tree: clamped
        return (kv < start) | ((q >= start) & (kv < start + n) & on[node, other])

    return MaskRule(f"draft_tree({n} nodes)", rule, (covers,))


def at_positions(rule: MaskRule, positions: Tensor) -> MaskRule:
    """``rule`` applied to each token's position instead of its key slot: ``rule(b, h, pos[q], pos[kv])``.

    A rule compares slots, and a slot is a position only when tokens sit in order. In a draft tree siblings share a
    position (:func:`tree_positions`), so a sliding window must be measured by positions:
    ``at_positions(sliding_window(w), pos) & draft_tree(parents, start=P)``. The queries are the last ``T`` slots.

    Args:
        rule: the rule to apply.
        positions: the position of each of the ``S`` key slots, ``(S,)`` or ``(B, S)``, integers.

    Raises:
        TypeError: if ``rule`` is not a :class:`MaskRule` or ``positions`` not an integer tensor.
        ValueError: if ``positions`` is not 1-D or 2-D; when applied, unless it has one entry per key slot.

    Example:
        >>> pos = torch.tensor([0, 1, 2, 2])  # two siblings at position 2
        >>> mask_tensor(at_positions(sliding_window(2), pos), 2, 4)[0, 0].int().tolist()
        [[0, 1, 1, 1], [0, 1, 1, 1]]
    """
    if not isinstance(rule, MaskRule):
        raise TypeError(f"rule must be a MaskRule (causal(), sliding_window(...), ...); got {type(rule).__name__}")
    if not isinstance(positions, Tensor) or _int_tensor(positions, None) is None:
        got = positions.dtype if isinstance(positions, Tensor) else type(positions).__name__
        raise TypeError(f"positions must be an integer tensor, one position per key slot; got {got}")
    if positions.ndim not in (1, 2) or positions.shape[-1] == 0:
        raise ValueError(f"positions must be (S,) or (B, S), one per key slot, S >= 1; got shape "
                         f"{tuple(positions.shape)}")
    rows = positions if positions.ndim == 2 else positions[None]  # (B or 1, S)
    n = rows.shape[-1]

    def covers(B: int, T: int, S: int, device: torch.device) -> None:
        if n != S:
            raise ValueError(f"positions give {n} slots but there are S={S} keys: one position per key slot")

    def at(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        row = b if rows.shape[0] > 1 else 0
        return rule(b, h, rows[row, q], rows[row, kv])

    checks = (covers, _per_sequence("positions", rows.shape[0]), _on_device("positions", rows), *rule.checks)
    return MaskRule(f"at_positions({rule.name})", at, checks)


def mask_tensor(rule: MaskRule, T: int, S: int | None = None, *, B: int = 1, H: int = 1,
                device: torch.device | str | None = None) -> Tensor:
    """The rule on every (query, key) pair: a bool tensor, ``True`` = may attend.

    Query ``i`` is at position ``i + S - T`` (bottom-right): the one place the offset is bound for a tensor.

    Shapes:
        output: ``(B or 1, H or 1, T, S)``: a size is 1 where the rule does not depend on it.

    Raises:
        TypeError, ValueError: naming a size, or what the rule's own checks refuse.

    Example:
        >>> mask_tensor(causal(), 2, 3)[0, 0].int().tolist()  # the last query sees every key
        [[1, 1, 0], [1, 1, 1]]
    """
    if not isinstance(rule, MaskRule):
        raise TypeError(f"rule must be a MaskRule (causal(), sliding_window(...), ...); got {type(rule).__name__}")
    T = size("T", T, 0)
    S = T if S is None else size("S", S, 0)
    B, H = size("B", B), size("H", H)
    rule.check(B, T, S, device)
    b = torch.arange(B, device=device).view(B, 1, 1, 1)
    h = torch.arange(H, device=device).view(1, H, 1, 1)
    q = (torch.arange(T, device=device) + S - T).view(1, 1, T, 1)  # positions, bottom-right
    kv = torch.arange(S, device=device).view(1, 1, 1, S)
    keep = rule(b, h, q, kv)
    return torch.broadcast_to(keep, torch.broadcast_shapes(keep.shape, (1, 1, T, S)))  # type: ignore[no-untyped-call]


def mask_mod(rule: MaskRule, T: int, S: int | None = None) -> MaskFn:
    """The rule as a FlexAttention ``mask_mod``, ``(b, h, q_idx, kv_idx) -> bool`` over *indices*: query ``q_idx``
    is at position ``q_idx + S - T`` (bottom-right). Check the rule first (:meth:`MaskRule.check`, as
    :func:`lessons_src.flex.block_mask` does).

    Example:
        >>> mask_mod(causal(), 2, 3)(0, 0, torch.tensor(0), torch.arange(3)).tolist()  # query 0 is at position 1
        [True, True, False]
    """
    if not isinstance(rule, MaskRule):
        raise TypeError(f"rule must be a MaskRule (causal(), sliding_window(...), ...); got {type(rule).__name__}")
    T = size("T", T, 0)
    offset = (T if S is None else size("S", S, 0)) - T

    def at_positions(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
        return rule(b, h, q_idx + offset, kv_idx)

    at_positions.__name__ = rule.name
    return at_positions


def by_distance(rule: MaskRule, T: int, S: int | None = None) -> list[bool]:
    """A causal-family rule as a table over the index distance ``d = kv_idx - q_idx``: entry ``d + T - 1``, for
    ``d`` from ``-(T - 1)`` to ``S - 1``, says whether a key ``d`` indices after a query is visible to it.

    The causal rule and a sliding window without kept first tokens (the rules that declare ``causal``) depend on
    nothing but that distance, so ``T + S - 1`` entries describe the whole ``T x S`` mask: a tiled loop reads which
    of its tiles are hidden, whole or partly visible from them without writing the rule again
    (:func:`lessons_src.flash.block_kind`). The rule is evaluated on Python ints (it only compares), so the
    table is a constant even inside ``torch.compile``.

    Example:
        >>> [int(v) for v in by_distance(sliding_window(2), 3)]  # d = -2 .. 2
        [0, 1, 1, 0, 0]
    """
    if not isinstance(rule, MaskRule):
        raise TypeError(f"rule must be a MaskRule (causal(), sliding_window(...), ...); got {type(rule).__name__}")
    if not rule.causal:
        raise ValueError(f"{rule.name} does not depend on the distance alone; by_distance takes the rules that "
                         "declare causal (causal(), sliding_window(w) without sink_tokens)")
    T = size("T", T, 0)
    S = T if S is None else size("S", S, 0)
    visible = mask_mod(rule, T, S)
    return [bool(visible(0, 0, T - 1, kv)) for kv in range(S + T - 1)]  # type: ignore[arg-type]  # from the last query


class CausalTiles:
    """A causal-family rule as a tiled loop reads it: which tiles are hidden, whole or partly visible.

    The rule is read through :func:`by_distance`: a tile of queries ``i0..i1-1`` and keys ``j0..j1-1`` spans the
    distances ``j0 - (i1 - 1) .. (j1 - 1) - i0``, every one of them reached by some query and key of the tile, so it
    is hidden entirely (``"skip"``) when none of them is visible and visible entirely (``"full"``) when all are.
    ``rule=None`` hides nothing. Used by the tiled loop (:mod:`lessons_src.flash`) and ring attention.

    Example:
        >>> tiles = CausalTiles(4, 4, causal())
        >>> [tiles.kind(0, 2, j, j + 2) for j in (0, 2)], tiles.visible(0, 2, 0, 2).int().tolist()
        (['partial', 'skip'], [[1, 0], [1, 1]])
    """

    def __init__(self, T: int, S: int, rule: MaskRule | None, device: torch.device | str | None = None) -> None:
        self.T = T
        self.table: Tensor | None = None  # None: nothing hidden
        if rule is not None:
            table = by_distance(rule, T, S)  # T + S - 1 bools: visible at distance d, entry d + T - 1
            self.seen = [0]  # seen[e]: how many of the entries below e are visible
            for visible in table:
                self.seen.append(self.seen[-1] + visible)
            self.table = torch.tensor(table, device=device)

    def kind(self, i0: int, i1: int, j0: int, j1: int) -> BlockKind:
        """``"skip"``, ``"full"`` or ``"partial"`` for the tile of queries ``i0..i1-1`` and keys ``j0..j1-1``."""
        if self.table is None:
            return "full"
        first, last = j0 - (i1 - 1) + self.T - 1, (j1 - 1) - i0 + self.T - 1  # the tile's distances, as entries
        visible = self.seen[last + 1] - self.seen[first]
        return "skip" if visible == 0 else "full" if visible == last - first + 1 else "partial"

    def visible(self, i0: int, i1: int, j0: int, j1: int) -> Tensor:
        """``(i1 - i0, j1 - j0)`` bool: which of the tile's keys each of its queries sees."""
        if self.table is None:
            raise ValueError("a rule of None hides nothing: every tile is full, no tile needs a mask")
        i = torch.arange(i0, i1, device=self.table.device)[:, None]
        j = torch.arange(j0, j1, device=self.table.device)[None, :]
        return self.table[j - i + self.T - 1]


# --------------------------------------------------------------------------- one mask preparation, for every backend


@dataclass(frozen=True)
class PreparedMask:
    """What every attention implementation is told about masking, checked once by :func:`prepare_mask`.

    Attributes:
        mask: the caller's mask as a 4-D tensor broadcastable to ``(B, H, T, S)``: bool (``True`` = may
            attend) or float in the queries' dtype (added to the scores); ``None`` for no mask.
        causal: whether the bottom-right causal mask applies too (key ``j`` visible to query ``i`` when
            ``j <= i + S - T``); ``False`` when it would hide nothing (one query, or no causal flag).
        T: query positions.
        S: key positions.
        window: with ``causal``, each query sees only the last ``window`` positions (``None``: all).
        device: the queries' (and the mask's) device, where :meth:`combined` builds the causal mask.
    """

    mask: Tensor | None
    causal: bool
    T: int
    S: int
    window: int | None = None
    device: torch.device | None = None

    def __post_init__(self) -> None:
        if self.mask is not None and not isinstance(self.mask, Tensor):
            raise TypeError(f"mask must be a tensor or None (prepare_mask makes one); got {type(self.mask).__name__}")

    def beyond_causal(self) -> str | None:
        """What of this mask a backend that takes only the causal flag could not do, in words, or ``None``."""
        if self.mask is not None:
            return "a mask besides the causal rule"
        return None if self.window is None else f"window={self.window}"

    def combined(self) -> Tensor | None:
        """The whole mask as one tensor (the caller's mask and the causal mask), or ``None``."""
        if not self.causal:
            return self.mask
        causal = causal_mask(self.T, self.S, window=self.window, device=self.device)  # (T, S) bool
        if self.mask is None:
            return causal
        dtype = self.mask.dtype if self.mask.dtype != torch.bool else torch.float32
        return combine_masks(self.mask, causal, dtype)


def prepare_mask(attn_mask: MaskLike, *, is_causal: bool, shape: tuple[int, int, int, int], dtype: torch.dtype,
                 device: torch.device) -> PreparedMask:
    """Check a mask once, for every implementation: shape, dtype and device, and the causal flag.

    Args:
        attn_mask: ``None``; a bool (``True`` = may attend) or float (added) tensor broadcastable to ``shape``,
            with at most 4 dims (a 1-D ``(S,)`` mask is a key mask shared by every query); a
            :class:`lessons_src.masks.MaskRule`; or a list of them, all of which apply. A rule that declares
            itself causal (``causal()``, ``sliding_window(w)``) becomes the causal flag and window that fast
            paths read (SDPA's own causal kernel, the tiles the tiled loop skips); any other becomes a bool tensor.
        is_causal: also hide future keys, aligned bottom-right; combined with the masks.
        shape: the scores' shape ``(B, H, T, S)``.
        dtype: the queries' dtype; a float mask is converted to it (as autocast converts the queries).
        device: the queries' device; a tensor mask must be on it.

    Raises:
        ValueError: naming the mask's shape, dtype or device, what a rule refuses, or a rule that widens the
            causal mask (a prefix LM) given with a causal flag or rule.
        TypeError: if ``is_causal`` is not a bool, or a mask is neither a tensor nor a rule.
    """
    flag("is_causal", is_causal)
    items = list(attn_mask) if isinstance(attn_mask, list | tuple) else [] if attn_mask is None else [attn_mask]
    B, H, T, S = shape
    causal, window, rest = _causal_part(items, is_causal)
    masks = [_checked_tensor(item, shape, dtype, device) for item in items if not isinstance(item, MaskRule)]
    if rest:
        masks.append(mask_tensor(and_masks(*rest), T, S, B=B, H=H, device=device))  # (B or 1, H or 1, T, S)
    mask = None
    for m in masks:  # 4-D: SDPA's kernels need it
        mask = combine_masks(mask, m.reshape((1,) * (4 - m.ndim) + tuple(m.shape)), dtype)
    return PreparedMask(mask, causal and (T > 1 or window is not None), T, S, window=window, device=device)


def _causal_part(items: list[object], is_causal: bool) -> tuple[bool, int | None, list[MaskRule]]:
    """The causal flag and window the rules declare (with ``is_causal``), and the rules left to materialise."""
    rules = [part for item in items if isinstance(item, MaskRule) for part in item.parts]
    causal = is_causal or any(r.causal for r in rules)
    windows = [r.window for r in rules if r.causal and r.window is not None]
    widening = [r.name for r in rules if r.widens_causal]
    if widening and causal:
        raise ValueError(f"{widening[0]} widens the causal mask (its prefix attends both ways); give it without "
                         "is_causal=True or a causal rule, it is causal after its prefix itself")
    return causal, min(windows) if windows else None, [r for r in rules if not r.causal]


def _checked_tensor(mask: object, shape: tuple[int, int, int, int], dtype: torch.dtype,
                    device: torch.device) -> Tensor:
    """A mask tensor checked against the scores (shape, dtype, device), a float one in the queries' dtype."""
    if not isinstance(mask, Tensor):
        raise TypeError(f"attn_mask must be a torch.Tensor, a MaskRule, a list of them or None; got "
                        f"{type(mask).__name__}")
    check_mask(mask, shape, dtype)
    if mask.device != device:
        raise ValueError(f"attn_mask is on {mask.device} but the queries are on {device}; move the mask there")
    return mask.to(dtype) if mask.dtype != torch.bool and mask.dtype != dtype else mask


# --------------------------------------------------------------------------- tensor builders, one per rule


def causal_mask(
    T: int,
    S: int | None = None,
    *,
    window: int | None = None,
    sink_tokens: int = 0,
    chunk: int | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Bool mask that lets query ``i`` see key ``j`` when ``j <= i + S - T`` (bottom-right aligned).

    The queries are the last ``T`` of ``S`` positions. With ``T > S`` (more queries than keys) the first
    ``T - S`` queries see nothing; attention gives them a zero output. With a ``window``, a query sees
    only the last ``window`` of those keys (itself included), plus the first ``sink_tokens`` keys.

    Args:
        T: number of query positions (``>= 0``).
        S: number of key positions (``>= 0``; defaults to ``T``).
        window: keep key ``j`` only when ``j > i + S - T - window`` (``None``: no window; ``>= 1``).
        sink_tokens: with a window, also keep keys ``0 .. sink_tokens - 1`` (causally); ``>= 0``.
        chunk: keep key ``j`` only in the query's chunk, ``j // chunk == (i + S - T) // chunk`` (``None``: no
            chunks; ``>= 1``; not with a window).
        device: where to build the mask.

    Returns:
        Bool tensor, ``True`` = may attend.

    Shapes:
        output: ``(T, S)``

    Raises:
        TypeError: if ``T``, ``S``, ``window`` or ``sink_tokens`` is not an int.
        ValueError: if ``T``, ``S`` or ``sink_tokens`` is negative, ``window`` or ``chunk`` is below 1,
            ``sink_tokens`` is given without a window, or a chunk with a window.

    Example:
        >>> causal_mask(2, 3).int().tolist()
        [[1, 1, 0], [1, 1, 1]]
        >>> causal_mask(2, 3, window=2).int().tolist()
        [[1, 1, 0], [0, 1, 1]]
    """
    T = size("T", T, 0)
    S = T if S is None else size("S", S, 0)
    window = check_window(window)
    chunk = check_chunk(chunk)
    sink_tokens = size("sink_tokens", sink_tokens, 0)
    if sink_tokens and window is None:
        raise ValueError(f"sink_tokens={sink_tokens} only means something with a window (without one every key is "
                         "kept)")
    if chunk is not None and window is not None:
        raise ValueError(f"chunk={chunk} and window={window} are two ways to limit the keys; a layer uses one")
    rule = causal() if window is None else sliding_window(window, sink_tokens=sink_tokens)
    if chunk is not None:
        rule = rule & same_chunk(chunk)
    return mask_tensor(rule, T, S, device=device)[0, 0]  # (T, S)


def check_window(window: object, *, is_causal: bool = True) -> int | None:
    """``window`` as an int of at least 1, or ``None``; a ``TypeError``/``ValueError`` naming it otherwise.

    A window narrows the causal mask, so it needs ``is_causal``: a window over future keys is not what
    sliding-window attention means.

    Example:
        >>> check_window(4096), check_window(None)
        (4096, None)
    """
    if window is None:
        return None
    if isinstance(window, bool) or not hasattr(window, "__index__"):
        raise TypeError(f"window must be an int or None; got {window!r} of type {type(window).__name__}")
    w = int(window.__index__())
    if w < 1:
        raise ValueError(f"window must be at least 1 (the query itself); got window={w}")
    if not is_causal:
        raise ValueError(f"window={w} narrows the causal mask, so it needs is_causal=True (or pass an attn_mask)")
    return w


def check_chunk(chunk: object, *, is_causal: bool = True) -> int | None:
    """``chunk`` as an int of at least 1, or ``None``; a ``TypeError``/``ValueError`` naming it otherwise.

    Chunks narrow the causal mask (Llama 4), so they need ``is_causal``, as a window does.

    Example:
        >>> check_chunk(8192), check_chunk(None)
        (8192, None)
    """
    if chunk is None:
        return None
    if isinstance(chunk, bool) or not hasattr(chunk, "__index__"):
        raise TypeError(f"chunk must be an int or None; got {chunk!r} of type {type(chunk).__name__}")
    c = int(chunk.__index__())
    if c < 1:
        raise ValueError(f"chunk must be at least 1 position (Llama 4 uses 8192); got chunk={c}")
    if not is_causal:
        raise ValueError(f"chunk={c} narrows the causal mask, so it needs is_causal=True (or pass an attn_mask)")
    return c


def chunk_mask(T: int, S: int, chunk: int, *, device: torch.device | str | None = None) -> Tensor:
    """Bool mask that lets query ``i`` see key ``j`` when both lie in the same chunk of ``chunk`` positions.

    The queries are the last ``T`` of ``S`` positions (query ``i`` is at ``i + S - T``), as for
    :func:`causal_mask`. Not causal by itself: ``causal_mask(T, S, chunk=chunk)`` is both.

    Shapes:
        output: ``(T, S)``

    Raises:
        TypeError: if a size is not an int.
        ValueError: if ``T`` or ``S`` is negative, or ``chunk`` is below 1.

    Example:
        >>> chunk_mask(3, 3, 2).int().tolist()
        [[1, 1, 0], [1, 1, 0], [0, 0, 1]]
    """
    return mask_tensor(same_chunk(chunk), T, S, device=device)[0, 0]  # (T, S)


def document_mask(documents: Tensor, T: int | None = None) -> Tensor:
    """Bool mask that lets a query see only the keys of its own document, for sequences packed into one row.

    ``documents[..., j]`` is the document of position ``j``. The queries are the last ``T`` of the ``S``
    positions (a cache: the ids cover the cached keys and the new tokens alike), so query ``i`` is at
    ``p = i + S - T`` and sees key ``j`` when ``documents[..., j] == documents[..., p]``. Not causal by itself:
    ``attention(..., is_causal=True, documents=ids)`` is causal within each document.

    Args:
        documents: integer document id of each of the ``S`` positions, one row per sequence of the batch
            or one row for all; the mask is built on its device.
        T: number of queries, the last ``T`` positions (``1 <= T <= S``; defaults to ``S``).

    Returns:
        Bool tensor, ``True`` = may attend.

    Shapes:
        documents: ``(S,)`` or ``(B, S)``; output: ``(T, S)`` or ``(B, 1, T, S)``.

    Raises:
        TypeError: if ``documents`` is not an integer tensor, or ``T`` not an int.
        ValueError: if ``documents`` is not 1-D or 2-D with at least one position, or ``T`` is not in ``1 .. S``.

    Example:
        >>> document_mask(torch.tensor([0, 0, 1])).int().tolist()
        [[1, 1, 0], [1, 1, 0], [0, 0, 1]]
        >>> document_mask(torch.tensor([0, 0, 1]), T=1).int().tolist()  # the last token, decoded with a cache
        [[0, 0, 1]]
    """
    rule = same_document(documents)
    S = documents.shape[-1]
    B = documents.shape[0] if documents.ndim == 2 else 1
    keep = mask_tensor(rule, S if T is None else T, S, B=B, device=documents.device)  # (B, 1, T, S)
    return keep if documents.ndim == 2 else keep[0, 0]  # (B, 1, T, S) or (T, S)


def prefix_lm_mask(
    T: int, S: int | None = None, *, prefix: int | Tensor | Sequence[int], device: torch.device | str | None = None
) -> Tensor:
    """Bool mask of a prefix LM: every query sees the first ``prefix`` keys, and the rest causally.

    Query ``i`` (at position ``i + S - T``, bottom-right as in :func:`causal_mask`) sees key ``j`` when
    ``j <= i + S - T`` or ``j < prefix``: the prefix attends to itself both ways, and what follows it is
    generated causally. ``prefix=0`` is the causal mask.

    Args:
        T: number of query positions, the last ``T`` of ``S`` (``1 <= T <= S``).
        S: number of key positions (defaults to ``T``).
        prefix: length of the bidirectional prefix, ``0 .. S``: one int for the batch, or one per sequence.
        device: where to build the mask (``None``: the lengths' device if they are a tensor, else the
            default device).

    Returns:
        Bool tensor, ``True`` = may attend.

    Shapes:
        output: ``(T, S)`` for one int, ``(B, 1, T, S)`` for ``B`` lengths.

    Raises:
        TypeError: if a size or a prefix length is not an int.
        ValueError: if ``T`` is not in ``1 .. S``, or a prefix length is outside ``0 .. S``.

    Example:
        >>> prefix_lm_mask(3, prefix=2).int().tolist()
        [[1, 1, 0], [1, 1, 0], [1, 1, 1]]
        >>> prefix_lm_mask(2, 3, prefix=[1, 3]).int()[:, 0].tolist()  # two sequences, two new queries each
        [[[1, 1, 0], [1, 1, 1]], [[1, 1, 1], [1, 1, 1]]]
    """
    if device is None and isinstance(prefix, Tensor):
        device = prefix.device
    rule = prefix_lm(prefix, device=device)
    one = not isinstance(prefix, Tensor) and hasattr(prefix, "__index__")
    B = 1 if one else len(prefix)  # type: ignore[arg-type]  # a tensor or a list of lengths here
    keep = mask_tensor(rule, T, S, B=B, device=device)  # (B, 1, T, S)
    return keep[0, 0] if one else keep  # (T, S) or (B, 1, T, S)


def padding_mask(
    lengths: Tensor | Sequence[int], S: int | None = None, *, device: torch.device | str | None = None
) -> Tensor:
    """Bool mask that hides the padding at the end of each sequence in a batch.

    Args:
        lengths: true (unpadded) length of each of the ``B`` sequences.
        S: padded length (defaults to ``max(lengths)``).
        device: where to build the mask (``None``: the lengths' device if they are a tensor, else the
            default device); pass the queries' device when the lengths are a list.

    Returns:
        Bool tensor, ``True`` for real tokens, ready to broadcast against ``(B, H, T, S)`` scores.

    Shapes:
        output: ``(B, 1, 1, S)``

    Raises:
        TypeError: if the lengths are not integers.
        ValueError: if a length is below 1 or above ``S``.

    Example:
        >>> padding_mask([2, 3]).int().squeeze().tolist()
        [[1, 1, 0], [1, 1, 1]]
    """
    if device is None and isinstance(lengths, Tensor):
        device = lengths.device
    rule = padding(lengths, device=device)
    B = lengths.numel() if isinstance(lengths, Tensor) else len(lengths)
    S = max(int(n) for n in lengths) if S is None else size("S", S, 0)
    return mask_tensor(rule, 1, S, B=B, device=device)  # (B, 1, 1, S)


def check_mask(mask: Tensor, target: tuple[int, ...], query_dtype: torch.dtype, name: str = "attn_mask") -> None:
    """Raise a ``ValueError`` unless ``mask`` is a bool or floating mask broadcastable to ``target``.

    Broadcastable *to* the scores, not merely *with* them: with ``B = 1`` a ``(2, 1, 1, S)`` mask would
    broadcast with ``(1, H, T, S)`` scores into a larger result, so it is refused.

    Args:
        mask: the mask to check.
        target: the scores' shape, usually ``(B, H, T, S)``.
        query_dtype: dtype of the queries; a floating mask of another dtype is accepted (and converted
            to it by the caller, as autocast converts the queries).
        name: the argument's name, used in the message.

    Raises:
        ValueError: naming the mask's shape or dtype and what would be accepted.
    """
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        raise ValueError(
            f"{name} has dtype {mask.dtype}, which is not supported; use torch.bool (True = may attend) "
            f"or a floating dtype such as the queries' {query_dtype} (added to the scores)"
        )
    try:
        ok = torch.broadcast_shapes(mask.shape, target) == tuple(target)  # type: ignore[no-untyped-call]
    except RuntimeError:
        ok = False
    if not ok:
        names = "(B, H, T, S)" if len(target) == 4 else f"{len(target)}-D scores"
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} is not broadcastable to the scores' shape "
            f"{names} = {tuple(target)}; use e.g. (T, S) = {tuple(target[-2:])}, "
            f"(B, 1, 1, S) = ({target[0]}, 1, 1, {target[-1]}) or the full shape"
        )


def combine_masks(a: Tensor | None, b: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    """Combine two masks so that a key is kept only when both keep it.

    Two bool masks are combined with ``&``; if either is a float mask, bool masks are first turned into
    ``0 / -inf`` float masks of ``dtype`` and the two are added.

    Example:
        >>> combine_masks(torch.tensor([True, False]), torch.tensor([True, True]), torch.float32).tolist()
        [True, False]
    """
    if a is None:
        return b
    if b is None:
        return a
    try:
        torch.broadcast_shapes(a.shape, b.shape)  # type: ignore[no-untyped-call]
    except RuntimeError:
        raise ValueError(f"masks of shapes {tuple(a.shape)} and {tuple(b.shape)} do not broadcast together") from None
    if a.device != b.device:
        raise ValueError(f"masks on {a.device} and {b.device} cannot be combined; move them to one device")
    if a.dtype == torch.bool and b.dtype == torch.bool:
        return a & b
    return _as_float(a, dtype) + _as_float(b, dtype)


def _as_float(mask: Tensor, dtype: torch.dtype) -> Tensor:
    if mask.dtype != torch.bool:
        return mask.to(dtype)
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, float("-inf"))
