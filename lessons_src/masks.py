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
(``i + S - T - W < j <= i + S - T``), aligned bottom-right like the causal mask; ``sinks=n`` keeps the
first ``n`` keys visible as well (StreamingLLM's attention sinks)::

    causal_mask(5, window=2, sinks=1)   key j ->  0 1 2 3 4
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

References:
    Raffel et al., "Exploring the Limits of Transfer Learning with a Unified Text-to-Text Transformer", JMLR
    2020 (arXiv:1910.10683), section 3.2.1: the prefix LM's mask.
    Krell et al., "Efficient Sequence Packing without Cross-contamination", 2021 (arXiv:2107.02027): packed
    sequences with a block-diagonal mask.
    Meta, Llama 4 model code (``llama_models/llama4/model.py``): chunked attention on the RoPE layers.
    Beltagy et al., "Longformer: The Long-Document Transformer", 2020 (arXiv:2004.05150), sliding windows.
    Xiao et al., "Efficient Streaming Language Models with Attention Sinks", ICLR 2024 (arXiv:2309.17453).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "causal_mask",
    "check_chunk",
    "check_mask",
    "check_window",
    "chunk_mask",
    "combine_masks",
    "document_mask",
    "padding_mask",
    "prefix_lm_mask",
]


def causal_mask(
    T: int,
    S: int | None = None,
    *,
    window: int | None = None,
    sinks: int = 0,
    chunk: int | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """Bool mask that lets query ``i`` see key ``j`` when ``j <= i + S - T`` (bottom-right aligned).

    The queries are the last ``T`` of ``S`` positions. With ``T > S`` (more queries than keys) the first
    ``T - S`` queries see nothing; attention gives them a zero output. With a ``window``, a query sees
    only the last ``window`` of those keys (itself included), plus the first ``sinks`` keys.

    Args:
        T: number of query positions (``>= 0``).
        S: number of key positions (``>= 0``; defaults to ``T``).
        window: keep key ``j`` only when ``j > i + S - T - window`` (``None``: no window; ``>= 1``).
        sinks: with a window, also keep keys ``0 .. sinks - 1`` (causally); ``>= 0``.
        chunk: keep key ``j`` only in the query's chunk, ``j // chunk == (i + S - T) // chunk`` (``None``: no
            chunks; ``>= 1``; not with a window).
        device: where to build the mask.

    Returns:
        Bool tensor, ``True`` = may attend.

    Shapes:
        output: ``(T, S)``

    Raises:
        TypeError: if ``T``, ``S``, ``window`` or ``sinks`` is not an int.
        ValueError: if ``T``, ``S`` or ``sinks`` is negative, ``window`` or ``chunk`` is below 1, ``sinks`` is
            given without a window, or a chunk with a window.

    Example:
        >>> causal_mask(2, 3).int().tolist()
        [[1, 1, 0], [1, 1, 1]]
        >>> causal_mask(2, 3, window=2).int().tolist()
        [[1, 1, 0], [0, 1, 1]]
    """
    T = _length("T", T)
    S = T if S is None else _length("S", S)
    window = check_window(window)
    chunk = check_chunk(chunk)
    sinks = _length("sinks", sinks)
    if sinks and window is None:
        raise ValueError(f"sinks={sinks} only means something with a window (without one every key is kept)")
    keep = torch.ones(T, S, dtype=torch.bool, device=device).tril(diagonal=S - T)  # j <= i + S - T
    if chunk is not None:
        if window is not None:
            raise ValueError(f"chunk={chunk} and window={window} are two ways to limit the keys; a layer uses one")
        return keep & chunk_mask(T, S, chunk, device=device)
    if window is None:
        return keep
    recent = torch.ones(T, S, dtype=torch.bool, device=device).triu(diagonal=S - T - window + 1)  # j > i+S-T-W
    sink = torch.arange(S, device=device) < sinks  # (S,)
    return keep & (recent | sink)


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
    T, S = _length("T", T), _length("S", S)
    c = check_chunk(chunk)
    if c is None:
        raise TypeError("chunk must be an int of at least 1; got None")
    query = (torch.arange(T, device=device) + S - T) // c  # (T,): each query's chunk
    key = torch.arange(S, device=device) // c  # (S,)
    return query[:, None] == key[None, :]  # (T, S)


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
    if not isinstance(documents, Tensor):
        raise TypeError(f"documents must be a tensor of integer document ids; got {type(documents).__name__}")
    if documents.dtype == torch.bool or documents.dtype.is_floating_point or documents.dtype.is_complex:
        raise TypeError(f"documents must hold integer document ids; got dtype {documents.dtype}")
    if documents.ndim not in (1, 2) or documents.shape[-1] == 0:
        raise ValueError(f"documents must be (S,) or (B, S), one id per position, S >= 1; got shape "
                         f"{tuple(documents.shape)}")
    S = documents.shape[-1]
    T = S if T is None else _length("T", T)
    if not 1 <= T <= S:
        raise ValueError(f"T={T} queries must be the last of the S={S} positions the document ids cover: "
                         f"1 <= T <= {S}")
    query = documents[..., S - T :]  # (..., T): the queries' documents
    keep = query[..., :, None] == documents[..., None, :]  # (..., T, S)
    return keep if documents.ndim == 1 else keep[:, None]  # (T, S) or (B, 1, T, S)


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
    T = _length("T", T)
    S = T if S is None else _length("S", S)
    if not 1 <= T <= S:
        raise ValueError(f"prefix_lm_mask needs 1 <= T <= S (the queries are the last T of S positions); "
                         f"got T={T}, S={S}")
    if not isinstance(prefix, Tensor) and hasattr(prefix, "__index__") and not isinstance(prefix, bool):
        P = _length("prefix", prefix)  # one length for the batch: no tensor values read (runs on meta)
        if P > S:
            raise ValueError(f"prefix={P} is longer than the S={S} keys; use 0 .. {S}")
        prefix_keys = torch.arange(S, device=device) < P  # (S,)
        return causal_mask(T, S, device=device) | prefix_keys  # (T, S)
    if device is None and isinstance(prefix, Tensor):
        device = prefix.device
    lengths = torch.as_tensor(prefix, device=device)
    if lengths.dtype == torch.bool or lengths.dtype.is_floating_point or lengths.dtype.is_complex \
            or lengths.ndim != 1 or lengths.numel() == 0:
        raise TypeError(f"prefix must be an int, or a 1-D list of ints (one per sequence); got {prefix!r}")
    bad = [int(n) for n in lengths if not 0 <= int(n) <= S]
    if bad:
        raise ValueError(f"every prefix length must be between 0 and S={S}; got {bad}")
    prefix_keys = torch.arange(S, device=lengths.device) < lengths[:, None, None]  # (B, 1, S)
    keep = causal_mask(T, S, device=lengths.device) | prefix_keys  # (B, T, S)
    return keep[:, None]  # (B, 1, T, S)


def _length(name: str, value: object, minimum: int = 0) -> int:
    """``value`` as an int of at least ``minimum``, or a ``TypeError``/``ValueError`` naming it (``8.0`` is not a
    length)."""
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{name} must be an int; got {value!r} of type {type(value).__name__}")
    n = int(value.__index__())
    if n < minimum:
        raise ValueError(f"{name} must be at least {minimum}; got {name}={n}")
    return n


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
    lengths_t = torch.as_tensor(lengths, device=device)
    if lengths_t.ndim != 1 or lengths_t.numel() == 0:
        raise ValueError(
            f"lengths must be a non-empty 1-D list of sequence lengths; got shape {tuple(lengths_t.shape)}"
        )
    if lengths_t.dtype == torch.bool or lengths_t.dtype.is_floating_point or lengths_t.dtype.is_complex:
        raise TypeError(f"lengths must be integers; got {lengths!r} ({lengths_t.dtype})")
    S = int(lengths_t.max()) if S is None else _length("S", S)
    bad = [int(n) for n in lengths_t if not 1 <= int(n) <= S]
    if bad:
        raise ValueError(f"every length must be between 1 and S={S}; got {bad}")
    keep = torch.arange(S, device=lengths_t.device) < lengths_t[:, None]  # (B, S)
    return keep[:, None, None, :]  # (B, 1, 1, S)


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
