"""Multi-head attention, written by you: one function per exercise, each checked by the course's checker.

Copy this file (``python -m lessons_src.lab.exercises start my_attention.py`` writes it for you), replace
each ``raise NotImplementedError`` with your code, and check one function or all of them::

    python -m lessons_src.lab.exercises check split_heads my_attention.py
    python -m lessons_src.lab.exercises check all my_attention.py

Shape letters, as in the lessons: B batch, T query positions, S key positions, D = d_model, H query heads,
K key/value heads, E head size (d_k = D / H), C latent size (MLA). Masks are bool, True = may attend.
Each function needs only ``torch``; the checker never shows you its answer, only where yours differs.
"""

import torch  # noqa: F401  (your code will need it)
from torch import Tensor


def split_heads(x: Tensor, num_heads: int) -> Tensor:
    """Split the model width into heads: ``(B, T, D) -> (B, H, T, E)`` with ``E = D // H``.

    Head ``h`` gets features ``h * E`` to ``h * E + E - 1`` of every position: ``out[b, h, t, e] ==
    x[b, t, h * E + e]``.

    Shapes:
        x: ``(B, T, D)``; output: ``(B, H, T, E)``.
    """
    raise NotImplementedError


def merge_heads(y: Tensor) -> Tensor:
    """Undo :func:`split_heads`: concatenate the heads' outputs, ``(B, H, T, E) -> (B, T, H * E)``.

    ``out[b, t, h * E + e] == y[b, h, t, e]``.

    Shapes:
        y: ``(B, H, T, E)``; output: ``(B, T, H * E)``.
    """
    raise NotImplementedError


def attention_scores(q: Tensor, k: Tensor) -> Tensor:
    """Scaled dot-product scores of every query against every key, in each head.

    ``scores[b, h, t, s] = q[b, h, t] . k[b, h, s] / sqrt(E)`` (E, the head size, is ``q``'s last dim).

    Shapes:
        q: ``(B, H, T, E)``, k: ``(B, H, S, E)``; output: ``(B, H, T, S)``.
    """
    raise NotImplementedError


def mha_param_count(d_model: int, num_heads: int, num_kv_heads: int, bias: bool) -> int:
    """The number of parameters of one attention layer: ``W_Q``, ``W_K``, ``W_V``, ``W_O`` (and their biases).

    ``num_kv_heads`` key/value heads of size ``E = d_model // num_heads`` (equal to ``num_heads`` for
    ordinary multi-head attention, fewer for GQA, 1 for MQA); ``bias`` adds one bias per output feature of
    each projection.

    Returns:
        An ``int``.
    """
    raise NotImplementedError


def dimension_arithmetic(d_model: int, num_heads: int) -> dict[str, int]:
    """The dimension arithmetic of one layer, as a dict of five ints.

    Keys: ``"head_dim"`` (d_k); ``"w_q_one_head"`` (parameters of one head's query projection);
    ``"w_q_all_heads"`` (of all heads' query projections together); ``"concat_width"`` (the width of the
    heads' outputs placed side by side); ``"w_o"`` (parameters of the output projection). No biases.

    Returns:
        ``{"head_dim": ..., "w_q_one_head": ..., "w_q_all_heads": ..., "concat_width": ..., "w_o": ...}``.
    """
    raise NotImplementedError


def causal_mask(T: int, S: int) -> Tensor:
    """Bool mask, True where query ``i`` may attend to key ``j``: the queries are the LAST ``T`` of ``S`` positions.

    Query ``i`` sits at position ``i + S - T``, so it may see key ``j`` when ``j <= i + S - T``
    (aligned bottom-right). With ``T == S`` that is the usual lower triangle; with ``T < S`` (new tokens
    after cached ones) the last query sees every key.

    Shapes:
        output: ``(T, S)``, dtype ``torch.bool``.
    """
    raise NotImplementedError


def padding_mask(lengths: list[int], S: int) -> Tensor:
    """Bool mask that lets every query see the real tokens of its sequence and hides the padding after them.

    Sequence ``b`` has ``lengths[b]`` real tokens followed by padding up to ``S``; the mask is True at
    real tokens, shaped to broadcast against scores ``(B, H, T, S)``.

    Shapes:
        lengths: ``B`` ints; output: ``(B, 1, 1, S)``, dtype ``torch.bool``.
    """
    raise NotImplementedError


def masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    """Attention weights: a softmax over the keys of the scores the bool mask allows (True = may attend).

    Hidden keys get weight 0. A query that may attend to no key at all (a fully masked row) gets all-zero
    weights, never ``NaN``.

    Shapes:
        scores: ``(B, H, T, S)``; mask: bool, broadcastable to it; output: ``(B, H, T, S)``.
    """
    raise NotImplementedError


def mha_forward(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor, num_heads: int) -> Tensor:
    """Multi-head self-attention (no mask, no bias) with the given weights, in ``nn.Linear``'s convention.

    Project (``q = x @ w_q.T``, likewise ``k`` and ``v``), split into ``num_heads`` heads, attend in each
    head (scaled by ``1 / sqrt(E)``), concatenate the heads, and apply the output projection
    (``@ w_o.T``).

    Shapes:
        x: ``(B, T, D)``; each weight: ``(D, D)``; output: ``(B, T, D)``.
    """
    raise NotImplementedError


def gqa_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Grouped-query attention (no mask): ``K`` key/value heads serve ``H`` query heads, ``n_rep = H // K`` each.

    Query heads ``0 .. n_rep - 1`` use KV head 0, the next ``n_rep`` use KV head 1, and so on: query head
    ``h`` uses KV head ``h // n_rep``. Scale the scores by ``1 / sqrt(E)``.

    Shapes:
        q: ``(B, H, T, E)``, k and v: ``(B, K, S, E)``; output: ``(B, H, T, E)``.
    """
    raise NotImplementedError


def decode_step(q: Tensor, k_new: Tensor, v_new: Tensor, k_cache: Tensor, v_cache: Tensor, position: int) -> Tensor:
    """One decoding step with a KV cache: store the new keys and values, then attend causally to everything cached.

    The caches hold ``position`` earlier tokens in slots ``0 .. position - 1`` (the slots after them are
    free). Write ``k_new`` and ``v_new`` into slots ``position .. position + T - 1`` (in place), then let
    the ``T`` new queries attend to the ``S = position + T`` filled slots, causally: new query ``i`` sees
    slots ``0 .. position + i``. Scale the scores by ``1 / sqrt(E)``.

    Shapes:
        q, k_new, v_new: ``(B, H, T, E)``; k_cache, v_cache: ``(B, H, max_len, E)``; output: ``(B, H, T, E)``.
    """
    raise NotImplementedError


def online_softmax(x: Tensor, block_size: int) -> Tensor:
    """Softmax over the last dim, reading ``x`` one block of ``block_size`` entries at a time (one pass).

    Keep a running maximum ``m`` and a running sum ``l`` of ``exp(x - m)`` per row, updated block by block;
    divide at the end. A row of only ``-inf`` (nothing visible) gives zeros, not ``NaN``.

    Shapes:
        x: ``(..., n)``; output: ``(..., n)``.
    """
    raise NotImplementedError


def absorb_query(q_nope: Tensor, w_uk: Tensor) -> Tensor:
    """MLA's weight absorption: fold each head's key up-projection into its query.

    Head ``h``'s key for a cached latent ``c`` (size ``C``) is ``W_UK_h c``, with ``W_UK_h`` rows
    ``h * E .. h * E + E - 1`` of ``w_uk`` (``nn.Linear(C, H * E)``'s weight). Return the latent-space
    queries ``q_latent`` with ``q_latent[b, h, t] . c == q_nope[b, h, t] . (W_UK_h c)`` for every ``c``,
    so attention can score the cached latents directly.

    Shapes:
        q_nope: ``(B, H, T, E)``; w_uk: ``(H * E, C)``; output: ``(B, H, T, C)``.
    """
    raise NotImplementedError


def softcapped_softmax(scores: Tensor, mask: Tensor, cap: float) -> Tensor:
    """Attention weights from scaled scores with Gemma 2's soft-cap: ``cap * tanh(scores / cap)``, then the mask.

    ``scores`` are already scaled by ``1 / sqrt(E)``. Cap them, hide the keys the bool ``mask`` forbids
    (``True`` = may attend), and take the softmax over the keys. A hidden key must get weight exactly 0, and a
    query that may see no key gets all zeros (not ``NaN``).

    Shapes:
        scores: ``(B, H, T, S)``; mask: broadcastable to it; output: ``(B, H, T, S)``.
    """
    raise NotImplementedError


def sink_attention(q: Tensor, k: Tensor, v: Tensor, sinks: Tensor, mask: Tensor) -> Tensor:
    """Attention with a learned sink logit per head (gpt-oss): one more column in each softmax, with no value.

    Scores ``q k^T / sqrt(E)``, hidden where the bool ``mask`` is ``False``; head ``h``'s sink logit
    ``sinks[h]`` joins every query's row as one more column; the softmax runs over the ``S + 1`` columns, and
    the weights on the ``S`` keys (the sink's share dropped) weight the values. A query that may see no key
    puts all its weight on the sink and gets zeros.

    Shapes:
        q: ``(B, H, T, E)``; k, v: ``(B, H, S, E)``; sinks: ``(H,)``; mask: ``(T, S)``; output: ``(B, H, T, E)``.
    """
    raise NotImplementedError


def qk_norm_scores(q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Qwen3's scores: RMS-normalise each head's queries and keys with a weight per feature, then RoPE, then score.

    ``x / sqrt(mean(x^2) + 1e-6) * weight`` over each head's ``E`` features (``q_weight`` for the queries,
    ``k_weight`` for the keys); then RoPE in the rotate-half layout, ``x * cos + rotate_half(x) * sin`` with
    ``rotate_half(x) = cat([-x2, x1])`` for the halves ``x1, x2`` of the last dim; then ``q k^T / sqrt(E)``.

    Shapes:
        q, k: ``(B, H, T, E)``; q_weight, k_weight: ``(E,)``; cos, sin: ``(T, E)``; output: ``(B, H, T, T)``.
    """
    raise NotImplementedError


def gated_output(x: Tensor, heads: Tensor, w_g: Tensor, w_o: Tensor) -> Tensor:
    """The elementwise output gate (Qiu et al.; Qwen3-Next), then ``W_O``.

    The gate is ``sigmoid(x @ w_g.T)``, one value per token, head and feature, computed from the layer's input
    ``x``; feature ``e`` of head ``h`` is gate entry ``h * E + e``. Gate each head's output, concatenate the
    heads, and apply the output projection ``w_o``.

    Shapes:
        x: ``(B, T, D)``; heads: ``(B, H, T, E)`` with ``H * E = D``; w_g: ``(H * E, D)``; w_o: ``(D, H * E)``;
        output: ``(B, T, D)``.
    """
    raise NotImplementedError


def delta_rule_step(state: Tensor, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor) -> Tensor:
    """One token of the gated delta rule (Gated DeltaNet): update ``state`` in place and return the query's read.

    In order: decay the state by ``exp(g)``; read what it holds for the key, ``S^T k``; write the difference
    ``beta * (v - S^T k)`` under the key (the outer product of ``k`` and that difference); the query reads the
    updated state, ``S^T q`` (``q`` is already scaled). Write the new state into ``state`` itself
    (``state.copy_(new)``): the caller keeps it for the next token.

    Shapes:
        state: ``(B, H, Dk, Dv)``; q, k: ``(B, H, Dk)``; v: ``(B, H, Dv)``; g (log decay, ``<= 0``) and beta:
        ``(B, H)``; output: ``(B, H, Dv)``.
    """
    raise NotImplementedError


def indexer_top_k(q: Tensor, k: Tensor, weights: Tensor, top_k: int) -> Tensor:
    """DeepSeek-V3.2's lightning indexer: each query's ``top_k`` best keys, one pick for all attention heads.

    The score of key ``s`` for query ``t`` is ``sum over h of weights[:, h, t] * ReLU(q[:, h, t] . k[:, s])``
    (``Hi`` indexer heads, one key per position shared by them). Each query keeps its ``top_k`` best keys
    among those it may see: the ``T`` queries are the LAST ``T`` of the ``S`` positions, so query ``t`` sees
    keys ``0 .. t + S - T``; a query that sees fewer than ``top_k`` keys keeps all it sees. Return the picks as
    one keep-mask (``True`` = attend) with a single head axis: the layer's attention heads all use it.

    Shapes:
        q: ``(B, Hi, T, Di)``; k: ``(B, S, Di)``; weights: ``(B, Hi, T)``; top_k: an int from 1 to ``S``;
        output: ``(B, 1, T, S)``, bool.
    """
    raise NotImplementedError


def causal_mask_mod(q_idx: Tensor, kv_idx: Tensor, T: int, S: int) -> Tensor:
    """The body of a FlexAttention ``mask_mod`` for the causal mask when ``T`` new queries follow cached keys.

    FlexAttention calls ``mask_mod(b, h, q_idx, kv_idx)`` and keeps key ``kv_idx`` for query ``q_idx`` where it
    returns ``True``; yours is wrapped as ``lambda b, h, q_idx, kv_idx: causal_mask_mod(q_idx, kv_idx, T, S)``.
    The ``T`` queries are the LAST ``T`` of the ``S`` positions (``S - T`` keys are cached before them). Use only
    elementwise operations: the indices arrive as tensors that broadcast.

    Shapes:
        q_idx: ``(T, 1)``, kv_idx: ``(1, S)`` (or any shapes that broadcast); output: their broadcast, bool.
    """
    raise NotImplementedError


def flex_sink_attention(q: Tensor, k: Tensor, v: Tensor, sinks: Tensor) -> Tensor:
    """Attention over every key with gpt-oss's learned sinks, run by FlexAttention (no mask).

    Call ``torch.nn.attention.flex_attention.flex_attention`` (eager: no ``torch.compile``). Head ``h``'s sink
    logit ``sinks[h]`` joins each query's softmax as one more column with no value, so the weights on the keys
    sum to less than 1. Scale the scores by ``1 / sqrt(E)`` (FlexAttention's default).

    Shapes:
        q, k, v: ``(B, H, T, E)``, sinks: ``(H,)``; output: ``(B, H, T, E)``.
    """
    raise NotImplementedError


def gqa_decode_intensity(batch: int, num_heads: int, num_kv_heads: int, head_dim: int, cached: int,
                         bytes_per_number: int) -> dict[str, float]:
    """The arithmetic intensity of one GQA decoding step's attention: FLOPs per byte read from the cache.

    Each of the ``batch`` sequences has one new query per query head; each query head scores the ``cached`` keys
    of its group's KV head (size ``head_dim``) and takes the weighted sum of as many values. Count as PyTorch's
    ``FlopCounterMode`` and the GPUs' data sheets do: the two matrix products only (softmax, scaling and masking
    count 0), 2 FLOPs per multiply-add. Count the bytes of the cached keys and values the step reads
    (``bytes_per_number`` each), read once per KV head; leave out the weights, the query and the output.

    Returns:
        ``{"flops": ..., "bytes": ..., "intensity": ...}``: two ints, and FLOPs / bytes as a float.
    """
    raise NotImplementedError


def merge_attention_states(o1: Tensor, lse1: Tensor, o2: Tensor, lse2: Tensor) -> tuple[Tensor, Tensor]:
    """Merge two attention states over disjoint sets of keys into the state over all of them.

    A state is a query's attention output over some keys, ``o``, and the log-sum-exp of its scores over them,
    ``lse = log(sum(exp(scores)))`` (natural log). A state over no key is *empty*: its ``lse`` is ``-inf`` and its
    output is 0. Return the output and the log-sum-exp attention over both sets of keys would give; two empty
    states merge into an empty state.

    Shapes:
        o1, o2: ``(B, H, T, E)``; lse1, lse2: ``(B, H, T)``; returns ``((B, H, T, E), (B, H, T))``.
    """
    raise NotImplementedError


def rope_interleaved(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """RoPE in the interleaved layout: features ``2i`` and ``2i + 1`` form pair ``i`` (Meta's Llama code, DeepSeek).

    Pair ``i`` turns by its angle ``a``: ``(x[2i], x[2i + 1]) -> (x[2i] cos a - x[2i + 1] sin a,
    x[2i + 1] cos a + x[2i] sin a)``, and the result keeps each pair where it was. ``cos`` and ``sin`` come
    from ``lessons_src.rope.rope_cos_sin``, made for the rotate-half layout: column ``i`` (and column
    ``i + E/2`` again) holds pair ``i``'s angle.

    Shapes:
        x: ``(B, H, T, E)``; cos, sin: ``(T, E)``; output: ``(B, H, T, E)``.
    """
    raise NotImplementedError


def flash_tile_step(m: Tensor, l: Tensor, acc: Tensor, s: Tensor, v: Tensor) -> dict[str, Tensor]:
    """One step of FlashAttention's forward loop for a block of queries: fold in one tile of keys.

    ``m`` is each query's running maximum score (``-inf`` while it has seen no key), ``l`` its running sum of
    ``exp(score - m)`` and ``acc`` its running sum of ``exp(score - m) * value``, over the tiles before this one.
    ``s`` holds this tile's scores (already scaled; ``-inf`` where a key is hidden) and ``v`` its values. Return
    the three after the tile: ``acc / l`` is then the output over every key so far. A query that has seen only
    ``-inf`` keeps ``m = -inf``, ``l = 0`` and ``acc = 0``, with no ``NaN``.

    Shapes:
        m, l: ``(Q,)``; acc: ``(Q, E)``; s: ``(Q, K)``; v: ``(K, E)``.

    Returns:
        ``{"m": ..., "l": ..., "acc": ...}`` with the shapes of ``m``, ``l`` and ``acc``.
    """
    raise NotImplementedError


def causal_key_ends(T: int, S: int, block_q: int) -> list[int]:
    """How many keys each program of a causal FlashAttention kernel must load, from key 0.

    The ``T`` queries are cut into blocks of ``block_q`` (the last may be shorter), one program each. With the
    bottom-right causal mask (query ``i`` sees key ``j`` when ``j <= i + S - T``), a block needs the keys up to
    the last one its last query sees, and none after: return, for each block, one past that key (0 if the
    block sees no key, never more than ``S``).

    Returns:
        A list of ``ceil(T / block_q)`` ints.
    """
    raise NotImplementedError


def lse_in_base_2(x: Tensor, block_size: int) -> Tensor:
    """Each row's log-sum-exp, ``log(sum(exp(x)))``, kept in base 2 as the Triton kernel keeps it.

    Read ``x`` one block of ``block_size`` entries at a time. Work in base 2, where ``exp(x) == exp2(x * log2(e))``:
    keep a running maximum ``m`` of ``x * log2(e)`` and a running sum ``l`` of ``exp2(x * log2(e) - m)``. At the
    end return the natural log-sum-exp. A row of only ``-inf`` gives ``-inf``, not ``NaN``.

    Shapes:
        x: ``(..., n)``; output: ``(...)``.
    """
    raise NotImplementedError


def draft_tree_mask(parents: list[int], cached: int) -> tuple[Tensor, Tensor]:
    """The mask and positions that check a tree of draft tokens in one pass, after ``cached`` cached tokens.

    Draft ``i``'s parent is ``parents[i]``: an earlier draft's index, or ``-1`` for the last cached token. The
    queries are the ``n`` drafts; the keys are the ``cached`` tokens, then the ``n`` drafts in order. A draft may
    see every cached key and, among the drafts, only its ancestors and itself. Its position is ``cached`` plus its
    depth (a draft whose parent is ``-1`` is at ``cached``).

    Returns:
        the mask, ``(n, cached + n)`` bool, True = may attend; the positions, ``(n,)`` int64.

    Example:
        ``parents=[-1, 0, 0], cached=1`` gives ``[[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 0, 1]]`` and ``[1, 2, 2]``.
    """
    raise NotImplementedError


def left_padded_positions(lengths: list[int], T: int) -> Tensor:
    """Each token's position in a batch of prompts left padded to ``T`` slots, as RoPE must see it.

    Row ``b`` holds a prompt of ``lengths[b]`` tokens in its last ``lengths[b]`` slots, padding before. A prompt's
    first real token is at position 0, whatever padding precedes it, and each later token one further; a padding
    slot gets 0 (the padding mask hides it: any position would do, 0 is the convention here).

    Returns:
        ``(B, T)`` int64 positions.

    Example:
        ``lengths=[2, 3], T=3`` gives ``[[0, 0, 1], [0, 1, 2]]``.
    """
    raise NotImplementedError


def packed_step_positions(cached: list[int], new: list[int]) -> Tensor:
    """Each token's position in its own request, in one step of continuous batching that packs several requests.

    The step lays ``new[i]`` tokens of request ``i`` end to end in one row, request after request; request ``i``
    already holds ``cached[i]`` positions in its cache, so its new tokens continue from there. RoPE must rotate
    each token by that position, not by its slot in the row.

    Returns:
        ``(T,)`` int64 positions, ``T = sum(new)``.

    Example:
        ``cached=[5, 0], new=[1, 3]`` gives ``[5, 0, 1, 2]``.
    """
    raise NotImplementedError


def quantize_tile(x: Tensor, bits: int, tile: int) -> Tensor:
    """Each tile of ``tile`` numbers of ``x`` quantized to ``bits``-bit integer codes and back, as a KV cache does.

    Along the last dimension, each tile of ``tile`` numbers gets one scale: its largest magnitude over the largest
    code, ``2 ** (bits - 1) - 1`` (127 for 8 bits, 7 for 4). Each number becomes the integer code nearest to it
    over the scale, kept within the codes ``-2 ** (bits - 1) .. 2 ** (bits - 1) - 1``; return the codes times
    their scale, the numbers the cache gives back.

    Shapes:
        x: ``(..., N)`` with ``N`` a multiple of ``tile``; output: the same.

    Example:
        ``x = [[1.0, -2.0, 0.5, 0.26]], bits=4, tile=2`` gives ``[[0.857, -2.0, 0.5, 0.286]]`` (rounded here).
    """
    raise NotImplementedError
