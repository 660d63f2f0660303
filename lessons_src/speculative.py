"""Speculative decoding without a second model: draft tokens guessed from the context, checked in one pass.

A decoder writes one token per forward pass, and on a small batch each pass costs about the same for one token
as for a few: it waits on reading the weights and the cache. So guess several tokens, run them through the model
in one pass, and keep the ones the model would have written itself. With greedy decoding the output is exactly
what plain decoding writes; only the number of passes changes.

* :func:`prompt_lookup` guesses by matching the last few tokens earlier in the context and copying what followed
  (prompt lookup decoding), one chain per distinct match.
* :func:`tree_from_drafts` merges several chains into a tree (shared beginnings once), as a parent array: the
  form :func:`lessons_src.masks.draft_tree` and :func:`lessons_src.masks.tree_positions` take, so the whole tree
  is checked in one pass.
* :func:`accept_greedy` walks the tree along the model's own choices: the longest path it agrees with, and the
  token after it.
* :class:`DraftCache` wraps any :class:`~lessons_src.kv_cache.LayerCache` and keeps the accepted path: a chain's
  path is a prefix of what was appended, so ``truncate`` alone drops the rest; a tree's path may skip nodes, so its
  keys and values (kept from the pass) are written again after ``truncate``.

References:
    Leviathan et al., "Fast Inference from Transformers via Speculative Decoding", ICML 2023 (arXiv:2211.17192).
    Saxena, "Prompt Lookup Decoding", 2023 (github.com/apoorvumang/prompt-lookup-decoding).
    Miao et al., "SpecInfer", ASPLOS 2024 (arXiv:2305.09781): a token tree verified in one pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor

from ._checks import instance, size
from .kv_cache import LayerCache
from .masks import tree_ancestors

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["DraftCache", "accept_greedy", "prompt_lookup", "tree_from_drafts"]


def _token_list(name: str, ids: object) -> list[int]:
    """``ids`` (a 1-D integer tensor or a list of ints) as a list, or an error naming ``name``."""
    if isinstance(ids, Tensor):
        if ids.dtype == torch.bool or ids.dtype.is_floating_point or ids.dtype.is_complex or ids.ndim != 1:
            raise TypeError(f"{name} must be a 1-D tensor of token ids; got dtype {ids.dtype}, shape "
                            f"{tuple(ids.shape)}")
        return [int(t) for t in ids.tolist()]
    if not isinstance(ids, list | tuple):
        raise TypeError(f"{name} must be a list or 1-D tensor of token ids; got {type(ids).__name__}")
    bad = [t for t in ids if isinstance(t, bool) or not hasattr(t, "__index__")]
    if bad:
        raise TypeError(f"{name} must hold int token ids; got {bad[0]!r}")
    return [int(t.__index__()) for t in ids]


def prompt_lookup(context: Tensor | Sequence[int], *, ngram: int = 3, draft_len: int = 8,
                  max_drafts: int = 1) -> list[list[int]]:
    """Draft chains copied from the context: what followed earlier occurrences of its last ``ngram`` tokens.

    The last ``ngram`` tokens are searched for earlier in ``context``, latest match first; each match proposes the
    (up to) ``draft_len`` tokens that followed it. Matches proposing the same chain count once, and at most
    ``max_drafts`` chains are returned. Without a match of ``ngram`` tokens, shorter n-grams are tried, down to
    one token; no match at all gives ``[]`` (decode one token plainly).

    Args:
        context: the token ids so far, the last one included.
        ngram: the longest n-gram matched (``>= 1``).
        draft_len: tokens per chain (``>= 1``).
        max_drafts: chains at most (``>= 1``): one for a chain, more for a tree (:func:`tree_from_drafts`).

    Returns:
        Up to ``max_drafts`` distinct lists of token ids.

    Raises:
        TypeError: if ``context`` is not a list or 1-D tensor of ints, or a size is not an int.
        ValueError: if a size is below 1.

    Example:
        >>> prompt_lookup([5, 1, 2, 3, 9, 1, 2, 7, 4, 1, 2], ngram=2, draft_len=2, max_drafts=3)
        [[7, 4], [3, 9]]
    """
    ids = _token_list("context", context)
    ngram, draft_len = size("ngram", ngram), size("draft_len", draft_len)
    max_drafts = size("max_drafts", max_drafts)
    for n in range(min(ngram, len(ids) - 1), 0, -1):
        tail, drafts = ids[-n:], []
        for s in range(len(ids) - n - 1, -1, -1):  # latest first; s + n < len(ids): something follows
            if ids[s : s + n] == tail:
                chain = ids[s + n : s + n + draft_len]
                if chain not in drafts:
                    drafts.append(chain)
                if len(drafts) == max_drafts:
                    break
        if drafts:
            return drafts
    return []


def tree_from_drafts(root: int, drafts: Sequence[Sequence[int]]) -> tuple[list[int], list[int]]:
    """Merge draft chains into one tree of tokens after ``root``: the tokens and each one's parent.

    Node 0 is ``root`` (the token the model wrote last, not yet in the cache), with parent ``-1``; each chain hangs
    from it, sharing the nodes of any earlier chain that begins the same way. Parents come before their children.
    One chain gives ``parents = [-1, 0, 1, 2, ...]``.

    Raises:
        TypeError: if ``root`` or a draft token is not an int, or ``drafts`` is not a list of lists.

    Example:
        >>> tree_from_drafts(0, [[7, 4], [7, 5], [3]])
        ([0, 7, 4, 5, 3], [-1, 0, 1, 1, 0])
    """
    tokens, parents = [_token_list("root", [root])[0]], [-1]
    if not isinstance(drafts, list | tuple):
        raise TypeError(f"drafts must be a list of chains (lists of token ids); got {type(drafts).__name__}")
    child: dict[tuple[int, int], int] = {}  # (parent node, token) -> node
    for chain in drafts:
        at = 0
        for t in _token_list("each draft", chain):
            if (at, t) not in child:
                child[at, t] = len(tokens)
                tokens.append(t)
                parents.append(at)
            at = child[at, t]
    return tokens, parents


def accept_greedy(tokens: Sequence[int], parents: Sequence[int], logits: Tensor) -> tuple[list[int], int]:
    """The longest path of the tree that greedy decoding would have written, and the token after it.

    From node 0 (the root), the model's likeliest next token (the argmax of that node's logits) is looked for among
    the node's children; if one holds it, the path goes on from there. Where no child holds it, that token is the
    model's own next one, written after the path, so each pass writes at least one token.

    Args:
        tokens: the tree's tokens, node 0 the root (:func:`tree_from_drafts`).
        parents: each node's parent, ``-1`` for the root.
        logits: the one-pass logits at every node, ``(n, V)``.

    Returns:
        ``(path, next_token)``: node indices from 0, and the token the model writes after the path.

    Raises:
        TypeError, ValueError: if the tree is not a tree (:func:`lessons_src.masks.tree_ancestors`), ``tokens`` and
            ``parents`` differ in length, or ``logits`` is not ``(n, V)``.

    Example:
        >>> logits = torch.eye(8)[[7, 4, 1, 1]]  # node 0 prefers 7, node 1 prefers 4, ...
        >>> accept_greedy([0, 7, 3, 4], [-1, 0, 0, 1], logits)
        ([0, 1, 3], 1)
    """
    toks = _token_list("tokens", tokens)
    n = tree_ancestors(parents, device="cpu").shape[0]  # checks the parent array
    if len(toks) != n:
        raise ValueError(f"tokens has {len(toks)} entries but parents has {n}: one token per node")
    if not isinstance(logits, Tensor) or logits.ndim != 2 or logits.shape[0] != n:
        got = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(f"logits must be (n, V) = ({n}, V), one row per node; got {got}")
    best = logits.argmax(dim=-1).tolist()  # (n,): each node's next token
    children: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        children.setdefault(int(p), []).append(i)
    path, node = [0], 0
    while True:
        hit = [c for c in children.get(node, []) if toks[c] == best[node]]
        if not hit:
            return path, int(best[node])
        node = hit[0]
        path.append(node)


class DraftCache(LayerCache):
    """A layer's cache during speculative decoding: the cache it wraps, and the keys and values of the last pass.

    Pass it to the layer as its cache (it is a :class:`~lessons_src.kv_cache.LayerCache`): a verification pass
    appends every draft node. :meth:`keep` then keeps the accepted path as the next positions and drops the rest,
    through the wrapped cache's ``truncate`` (a paged cache frees the pages of rejected branches): a path that is a
    prefix of the nodes (a chain) is only a ``truncate``; another path is written again from the keys and values
    the pass computed, which were rotated by the nodes' positions (:func:`lessons_src.masks.tree_positions`), the
    very positions the path's tokens take.

    Shapes:
        as the wrapped cache's :meth:`~lessons_src.kv_cache.LayerCache.update`.

    Raises:
        TypeError: if ``cache`` is not a ``LayerCache``.

    Example:
        >>> from lessons_src.kv_cache import KVCache
        >>> cache = DraftCache(KVCache(batch_size=1, num_kv_heads=1, head_dim=2, max_len=8))
        >>> _ = cache.update(torch.zeros(1, 1, 3, 2), torch.zeros(1, 1, 3, 2))  # 3 tokens: the prompt
        >>> k = torch.arange(4.0).view(1, 1, 4, 1).expand(1, 1, 4, 2)  # 4 draft nodes, node i's key holds i
        >>> _ = cache.update(k, k)
        >>> cache.keep([0, 2, 3])  # a path that skips node 1
        >>> cache.length, cache.cache.k[0, 0, 3:6, 0].tolist()
        (6, [0.0, 2.0, 3.0])
    """

    def __init__(self, cache: LayerCache) -> None:
        instance("cache", cache, LayerCache, "a LayerCache such as KVCache")
        self.cache = cache
        self.last: tuple[int, Tensor, Tensor] | None = None  # (first position, keys, values) of the last update

    @property
    def length(self) -> int:
        """Positions the wrapped cache holds."""
        return self.cache.length

    @length.setter
    def length(self, value: int) -> None:
        self.cache.truncate(value)

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """The wrapped cache's ``update``; the new keys and values are kept for :meth:`keep`."""
        start = self.cache.length
        out = self.cache.update(k, v)
        self.last = (start, k, v)
        return out

    def truncate(self, length: int) -> None:
        """The wrapped cache's ``truncate``."""
        self.cache.truncate(length)
        if self.last is not None and self.cache.length < self.last[0] + self.last[1].shape[2]:
            self.last = None  # the last pass's positions are gone

    @property
    def nbytes(self) -> int:
        """The wrapped cache's bytes (the kept keys and values of one pass are not counted)."""
        return self.cache.nbytes

    def keep(self, path: Sequence[int]) -> None:
        """Of the positions the last ``update`` appended, keep those at ``path`` (indices among them, increasing),
        as the next positions, and drop the others.

        Raises:
            ValueError: if no pass is kept (nothing appended since the last ``keep`` or ``truncate``), or ``path``
                is not increasing indices of the appended positions.
        """
        if self.last is None:
            raise ValueError("keep() needs the positions of the last pass, and none are held: call it once after "
                             "each verification pass")
        start, k, v = self.last
        idx = _token_list("path", path)
        T = k.shape[2]
        if any(not 0 <= i < T for i in idx) or sorted(set(idx)) != idx:
            raise ValueError(f"path must be increasing indices among the {T} positions of the last pass; got {idx}")
        self.last = None
        if idx == list(range(len(idx))):  # a prefix (a chain): dropping the rest is enough
            self.cache.truncate(start + len(idx))
            return
        at = torch.tensor(idx, device=k.device)
        self.cache.truncate(start)  # drop every node (a paged cache frees their pages) ...
        self.cache.update(k[:, :, at], v[:, :, at])  # ... and write the path again: (B, K, len(path), E)
