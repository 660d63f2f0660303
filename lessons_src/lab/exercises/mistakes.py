"""The catalogue of known mistakes: each one a real function that makes it, so the checker can recognise it.

A :class:`Misconception` is an idea that leads to wrong code (with the lesson section that explains it);
a :class:`Variant` is one exercise's function written with that idea and otherwise right. When a learner's
answer is wrong, the checker runs the exercise's variants on the same inputs; a variant that gives the
learner's output on every case names the mistake. ``tests/lab/test_exercises.py`` runs every variant through
the checker and requires it to be diagnosed as itself and as no other (the mutation matrix).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor

from . import solutions

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "MISCONCEPTIONS", "SCALED_EXERCISES", "SCALE_MISTAKES", "VARIANTS", "Link", "Misconception", "ScaleMistake",
    "ScaledExercise", "Variant",
]

_NEG_INF = float("-inf")


@dataclass(frozen=True)
class Link:
    """A section of the course: ``page`` is the Markdown source under ``docs/``, ``anchor`` the heading's id."""

    page: str
    anchor: str
    title: str

    @property
    def path(self) -> str:
        """The section's address relative to the site's root: ``lessons/pitfalls/#fully-masked-rows``."""
        return f"{self.page.removesuffix('.md')}/#{self.anchor}"


@dataclass(frozen=True)
class Misconception:
    key: str
    name: str
    why: str
    lesson: Link


@dataclass(frozen=True)
class Variant:
    """One exercise written with one mistake: ``what`` says what it does, in the learner's terms."""

    exercise: str
    key: str
    misconception: str
    what: str
    fn: Callable[..., object]


_PITFALLS = "lessons/pitfalls-in-code.md"
_GATE = Link("lessons/linear-attention.md", "the-gate-forgetting-on-purpose",
             "Layers with a fixed-size state: the gate")
_PICK = Link("lessons/choosing-keys.md", "a-cheap-score-picks-for-every-head",
             "Attention that chooses its keys: a cheap score picks for every head")
_READING = "lessons/reading-a-real-model.md"
_OTHER_PIECES = Link(_READING, "where-the-other-pieces-go",
                     "Reading a real model's attention: where the other pieces go")
_SCALE_ANCHOR = "7-scaling-by-sqrtd_textmodel-instead-of-sqrtd_k"
_SCALE_LESSON = Link(_PITFALLS, _SCALE_ANCHOR, "Pitfalls 2: scaling by √d_model")
_SCALE_WHY = Link(_PITFALLS, _SCALE_ANCHOR, "Pitfalls 2: why the scores are divided by √d_k")
_LAYOUTS = Link("lessons/positions.md", "two-layouts-which-features-pair", "Positions: two layouts")
_KERNEL_LESSON = Link("lessons/flash-in-triton.md", "the-forward-kernel-read-in-parts",
                      "FlashAttention in Triton: the forward kernel")
_STEP_COUNTED = Link("lessons/decoding-and-memory.md", "one-decoding-step-counted",
                     "Why decoding waits on memory: one decoding step, counted")
_PADDED = Link("lessons/many-prompts.md", "a-padded-batch", "Many prompts in one batch: a padded batch")
_TREE = Link("lessons/speculative-decoding.md", "a-tree-checked-in-one-pass",
             "Guess, then check: a tree checked in one pass")
_TILE = Link("lessons/quantized-cache.md", "a-code-and-a-scale",
             "A cache in 8-bit and 4-bit numbers: a code and a scale")
_MERGE = Link("lessons/split-and-merge.md", "the-attention-state-and-its-merge",
              "Split, merged, shared: the attention state, and its merge")
_PACKED = Link("lessons/continuous-batching.md", "one-step", "Serving attention, part 4: one step")
MISCONCEPTIONS: dict[str, Misconception] = {
    m.key: m
    for m in (
        Misconception(
            "view_without_transpose", "`view` without `transpose`",
            "Memory holds each position's D features together, so (B, T, D) -> (B, H, T, E) must first split "
            "the last dim, view(B, T, H, E), then swap T and H with transpose(1, 2); merging transposes back "
            "before the reshape. A single view or reshape gives the right shape and mixes positions and heads.",
            Link("lessons/split-run-concatenate.md", "the-split-traced-view-then-transpose",
                 "Split, run, concatenate: the split, traced"),
        ),
        Misconception(
            "scale_by_d_model", "scaling by √d_model instead of √d_head",
            "Each head's dot product has E = d_model / H terms, so its scores are divided by sqrt(E), the head "
            "size; dividing by sqrt(d_model) shrinks them by a further sqrt(H) and flattens every softmax.",
            _SCALE_LESSON,
        ),
        Misconception(
            "inverted_polarity", "inverted mask polarity",
            "PyTorch has two conventions for bool masks: F.scaled_dot_product_attention's True = may attend, "
            "which this course uses, and nn.MultiheadAttention's True = blocked. Yours is the opposite one.",
            Link(_PITFALLS, "6-mask-polarity-true-means-opposite-things", "Pitfalls 2: mask polarity"),
        ),
        Misconception(
            "top_left_causal", "top-left causal alignment",
            "With T new queries after cached keys (T < S), the queries are the last T positions: query i may "
            "see key j when j <= i + S - T (bottom-right). tril() without that offset, or SDPA's "
            "is_causal=True, aligns the triangle top-left and hides keys the new tokens should see.",
            Link("lessons/inference-variants.md", "a-pitfall-is_causaltrue-when-the-queries-are-fewer-than-the-keys",
                 "The KV cache: is_causal with fewer queries than keys"),
        ),
        Misconception(
            "repeat_not_interleave", "`repeat` instead of `repeat_interleave`",
            "KV head `g` serves query heads `g * n_rep .. g * n_rep + n_rep - 1`, so each KV head is repeated "
            "in place (`repeat_interleave` on the head dim); `.repeat` tiles the whole stack, so query head `h` "
            "reads KV head `h % K`. Nothing fails: the shapes are right and the model is silently wrong.",
            Link("lessons/gqa-mqa.md", "a-silent-bug-repeat-instead-of-repeat_interleave",
                 "GQA and MQA: .repeat instead of repeat_interleave"),
        ),
        Misconception(
            "softmax_over_queries", "softmax over the query axis",
            "Each query gets one probability distribution over the keys: the softmax runs over the last dim "
            "(S, the keys) so that every row of weights sums to 1, not over the queries (dim -2).",
            Link("lessons/why-multiple-heads.md", "one-head-one-softmax", "Why one head is not enough: one softmax"),
        ),
        Misconception(
            "forgot_w_o", "forgetting W_O",
            "After the heads are concatenated, the output projection W_O mixes what the heads found; without "
            "it each output feature comes from one head only.",
            Link("lessons/mixing-heads.md", "what-wo-is-for", "Mixing the heads: what W_O is for"),
        ),
        Misconception(
            "nan_rows", "NaN from a row of -inf",
            "A query that may see no key has a row of -inf scores; softmax computes exp(-inf - (-inf)) = NaN "
            "there, and the NaN spreads. Give such rows zero weights: shift by 0 instead of an infinite max "
            "and divide by 1 where the sum is 0.",
            Link(_PITFALLS, "fully-masked-rows", "Pitfalls 2: a fully masked row"),
        ),
        Misconception(
            "off_by_one_cache", "off-by-one cache positions",
            "The cache holds `position` tokens in slots 0 .. position - 1; the T new ones go in slots "
            "position .. position + T - 1, and the queries attend to the position + T filled slots: not one "
            "more, not one fewer.",
            Link("lessons/inference-variants.md", "the-kv-cache", "The KV cache"),
        ),
        Misconception(
            "no_rescale", "online softmax without rescaling the running sum",
            "The running sum l was taken relative to the old maximum m; when a block brings a larger maximum "
            "m_new, every term summed so far must be multiplied by exp(m - m_new) before the block's terms are "
            "added, or the old terms stay too large.",
            Link("lessons/flash-attention.md", "online-softmax", "FlashAttention: online softmax"),
        ),
        Misconception(
            "not_block_by_block", "a softmax over whole rows, not block by block",
            "Online softmax is for rows too long to hold at once (FlashAttention sees one block of keys at a time): "
            "the running maximum `m` and sum `l` are updated block by block, and no maximum or sum is ever taken "
            "over a whole row. A softmax over whole rows gives the same values and misses what the exercise is for.",
            Link("lessons/flash-attention.md", "online-softmax", "FlashAttention: online softmax"),
        ),
        Misconception(
            "heads_at_full_width", "each head at full width",
            "Heads partition d_model: each works in E = d_model / H dimensions, so all heads' projections "
            "together have as many parameters as one full-width head.",
            Link("lessons/parameters-and-compute.md", "head-count-is-a-partition",
                 "Parameters and compute: head count is a partition"),
        ),
        Misconception(
            "kv_heads_full", "GQA's key and value projections counted at full width",
            "With `K` key/value heads, `W_K` and `W_V` map `d_model` to `K * E` features, not `d_model`: that "
            "is what shrinks the KV cache and the layer.",
            Link("lessons/gqa-mqa.md", "grouped-query-and-multi-query-attention", "GQA and MQA"),
        ),
        Misconception(
            "heads_not_head_major", "an interleaved head split",
            "Features are head-major: head `h` owns features `h * E .. h * E + E - 1` (of each position, and "
            "so rows `h * E .. h * E + E - 1` of a projection's weight). Split the width as `(H, E)`, never "
            "`(E, H)`, which deals the features out to the heads in turn: head `h` gets features `h`, `h + H`, "
            "`h + 2H`, ... The shapes are right and the heads are silently wrong.",
            Link(_PITFALLS, "9-reshaping-with-the-wrong-axis-order", "Pitfalls 2: reshaping with the wrong axis order"),
        ),
        Misconception(
            "missing_scale", "no 1/√E scale",
            "Scores are q·k / sqrt(E): a dot product of E terms has a spread about sqrt(E) times that of one "
            "term, and dividing by sqrt(E) brings it back. Without it your scores are sqrt(E) times the "
            "expected ones, and the softmax saturates as E grows (Vaswani et al. 2017, section 3.2.1).",
            _SCALE_WHY,
        ),
        Misconception(
            "cap_after_mask", "the soft-cap applied after the mask",
            "The soft-cap c * tanh(s / c) maps every finite score into (-c, c), and -inf to -c: a hidden key's "
            "-inf becomes -c, a finite score, and the key gets weight again. Cap the scores first, then mask them.",
            _OTHER_PIECES,
        ),
        Misconception(
            "sink_weight_on_a_value", "the sink's weight put on a real token's value",
            "A learned sink is one more column of the softmax with no value: after the softmax its column is "
            "dropped, and every other column stays with its own key's value. Put it first and drop the last "
            "column, and the first key's value gets the sink's share while the last key loses its own.",
            _OTHER_PIECES,
        ),
        Misconception(
            "norm_after_rope", "QK-norm after RoPE where the model applies it before",
            "A norm with a weight scales feature i by w_i, and RoPE mixes feature i with feature i + E/2: the two "
            "steps commute only if the weight is the same on both features of every pair. Qwen3 (like Gemma 3 "
            "and OLMo) normalises the projected queries and keys first, then rotates them.",
            Link(_READING, "ours-and-theirs-run-together", "Reading a real model's attention: ours and theirs"),
        ),
        Misconception(
            "gate_after_w_o", "the output gate applied after W_O",
            "The gate scales each head's output (one value per head and feature) before W_O mixes the heads; "
            "after W_O a gate entry scales a mix of every head, so it can no longer silence one head.",
            _OTHER_PIECES,
        ),
        Misconception(
            "gate_after_write", "the decay applied after the write",
            "The gate decays what the state held before this token; then the erase reads the decayed state and "
            "the new value is written whole. Decay after the write and the erase removes more than the state "
            "holds, and the token's own value is decayed before anything reads it.",
            _GATE,
        ),
        Misconception(
            "no_erase", "the delta rule's erase term left out",
            "The delta rule writes beta * (v - S^T k), the difference between the value and what the state "
            "already holds for the key. Writing beta * v adds to the old value instead of replacing it: that is "
            "gated linear attention, which lets the old value fade only as the decay shrinks it, not when the "
            "key is written again.",
            Link("lessons/linear-attention.md", "the-delta-rule-erase-then-write",
                 "Layers with a fixed-size state: the delta rule"),
        ),
        Misconception(
            "read_before_write", "the query read before this token's write",
            "In the delta rule, as in causal attention, a token's query sees its own key and value: the output "
            "is read from the state after the write.",
            _GATE,
        ),
        Misconception(
            "top_k_over_queries", "the top-k taken over the queries",
            "Each query chooses among its keys: the top-k runs along the keys' axis, the last of the (B, T, S) "
            "scores. Along the queries' axis each key picks the queries that rank it highest, so a query can end "
            "with no key at all, or with many more than k.",
            _PICK,
        ),
        Misconception(
            "causal_after_pick", "causality applied after the pick",
            "A key the query may not see must be ruled out before the top-k (its score set to -inf). Picked first "
            "and removed after, a future key that scored high takes a place and leaves the query fewer than k "
            "keys, and the visible key ranked next is lost.",
            _PICK,
        ),
        Misconception(
            "pick_per_head", "a pick per indexer head",
            "DeepSeek-V3.2's indexer sums its heads' weighted ReLU scores into one score per key, then picks once "
            "for all the layer's attention heads. Picking per head and merging keeps more than k keys per query, "
            "and different ones.",
            _PICK,
        ),
        Misconception(
            "no_relu", "the indexer's ReLU left out",
            "Each indexer head's dot product goes through a ReLU before the weighted sum: a head that finds a key "
            "irrelevant adds nothing, rather than voting against it. Without it, negative products change the "
            "ranking.",
            _PICK,
        ),
        Misconception(
            "scale_by_e", "dividing by E instead of √E",
            "The scale is 1/sqrt(E), the square root of the head size: it undoes the sqrt(E) spread of a dot "
            "product of E terms. Dividing by E itself shrinks every score by a further sqrt(E) (yours are "
            "expected / sqrt(E)) and flattens the softmax.",
            _SCALE_WHY,
        ),
        Misconception(
            "sink_in_scores", "a learned sink inside the scores",
            "A learned sink is one more column of the softmax with no value: it adds exp(sink) to each query's "
            "normaliser. A score_mod sees one score at a time, never the row: adding the sink to every score is "
            "a constant per row, which the softmax removes, and normalising each score against the sink alone "
            "is not the row's softmax. Apply it after the kernel, with the log-sum-exp FlexAttention returns.",
            Link("lessons/mask-is-a-function.md", "score-changes-and-the-sink-that-is-not-one",
                 "A mask is a function: the sink that is not one"),
        ),
        Misconception(
            "rope_layout_swapped", "rotate-half: pairs (i, i + E/2) against (2i, 2i + 1)",
            "Rotate-half (GPT-NeoX, Hugging Face Llama, this course's apply_rope) pairs feature i with feature "
            "i + E/2; the interleaved layout (Meta's original Llama code, DeepSeek) pairs 2i with 2i + 1. The "
            "angles are the same, the features that turn together are not: a checkpoint trained in one layout "
            "runs in the other only after its W_Q and W_K rows are permuted.",
            _LAYOUTS,
        ),
        Misconception(
            "pairs_out_of_place", "the turned pairs returned in rotate-half order",
            "Each pair was turned right, but its two features came back as the first and second halves of the "
            "output, not side by side. Queries and keys permuted alike give the same scores (transformers' "
            "DeepSeek-V3 code does this on purpose), but any code that reads a feature by its index, a cache "
            "or a partial RoPE's unrotated part, now gets another feature.",
            _LAYOUTS,
        ),
        Misconception(
            "pair_angle_from_column_2i", "pair i's angle taken from column 2i",
            "rope_cos_sin lays its angles out for rotate-half: column i and column i + E/2 both hold pair i's "
            "angle. In the interleaved layout pair i still turns by pair i's angle, so take columns 0 .. E/2 - 1; "
            "cos[..., 0::2] gives the pairs the angles of other pairs.",
            _LAYOUTS,
        ),
        Misconception(
            "rope_turned_backwards", "each pair turned backwards",
            "RoPE turns (x, y) by the angle a: (x cos a - y sin a, y cos a + x sin a). With the signs swapped "
            "every pair turns by -a, so a model trained the usual way reads every offset reversed.",
            _LAYOUTS,
        ),
        Misconception(
            "acc_not_rescaled", "the output's running sum not rescaled",
            "`acc` is summed against the same running maximum as `l`: when a tile raises the maximum, both hold "
            "terms `exp(s - m)` that must become `exp(s - m_new)`. Rescale `l` alone and the output `acc / l` "
            "gives the earlier keys' values too much weight.",
            _KERNEL_LESSON,
        ),
        Misconception(
            "rescale_inverted", "the rescale factor inverted",
            "What was summed holds `exp(s - m)`; against the new maximum it is that times `exp(m - m_new)`, at most "
            "1, since the maximum only rises. `exp(m_new - m)` makes the old terms larger instead, and is infinite "
            "for a query that had seen nothing.",
            _KERNEL_LESSON,
        ),
        Misconception(
            "bound_from_first_query", "the loop's bound taken from the block's first query",
            "A program loads each tile of keys once for all its queries, so it must load every key any of them "
            "sees: the block's last query sees the most, up to key `(i_block + 1) * block_q - 1 + S - T`. Stopping "
            "at what the first query sees leaves the later queries without their last keys.",
            _KERNEL_LESSON,
        ),
        Misconception(
            "end_not_clamped", "the loop's bound not clamped to the keys",
            "`(i_block + 1) * block_q + S - T` passes `S` when the last block is short (`T` not a multiple of "
            "`block_q`): the loop would load tiles of keys that do not exist. With `T > S` it is negative for the "
            "first blocks, whose queries see no key: their count is 0.",
            _KERNEL_LESSON,
        ),
        Misconception(
            "end_is_last_key", "the last key's index given as the bound",
            "The loop runs `for j0 in range(0, end, BLOCK_K)`: `end` is one past the last key to load. The block's "
            "last query sees keys up to `(i_block + 1) * block_q - 1 + S - T`, so `end` is one more.",
            _KERNEL_LESSON,
        ),
        Misconception(
            "lse_in_base_2", "the log-sum-exp left in base 2",
            "In base 2 the statistics give `log2(sum(exp(x)))`; the kernel multiplies by `ln 2` at the end, since "
            "`ln(y) = log2(y) * ln 2`. Whoever reads it (the backward pass, a merge of partial results) expects the "
            "natural log.",
            _KERNEL_LESSON,
        ),
        Misconception(
            "exp2_without_log2e", "`exp2` of scores not multiplied by `log2(e)`",
            "`exp2(x)` is `2^x`, not `e^x`: the same weights come out only once the scores are multiplied by "
            "`log2(e)`, which the kernel folds into its scale (`qk_scale = scale * log2(e)`).",
            _KERNEL_LESSON,
        ),
        Misconception(
            "lse_without_max", "the running maximum left out of the log-sum-exp",
            "`l` is a sum of `exp2(x - m)`, taken relative to the maximum so that nothing overflows: the "
            "log-sum-exp is `m + log2(l)` (in base 2), not `log2(l)` alone.",
            _KERNEL_LESSON,
        ),
        Misconception(
            "kv_read_per_query_head", "K and V read once per query head",
            "In GQA the n_rep query heads of a group share one KV head: a decoding step reads each cached key and "
            "value once per KV head, and every query head of the group uses what was read. Counting a read per "
            "query head gives MHA's bytes and hides the very thing GQA saves.",
            _STEP_COUNTED,
        ),
        Misconception(
            "forgot_v", "the values forgotten",
            "A decoding step reads both halves of the cache: the keys for the scores, then the values for the "
            "weighted sum, as many numbers again, with as many multiply-adds.",
            _STEP_COUNTED,
        ),
        Misconception(
            "mac_as_one_flop", "a multiply-add counted as one FLOP",
            "FLOP counts (PyTorch's FlopCounterMode, the GPUs' data sheets) count a multiply and an add as two "
            "FLOPs: a product of an (m, k) and a (k, n) matrix is 2 m k n FLOPs. Count one per multiply-add and "
            "every intensity you compare with a machine's ratio is half what it should be.",
            _STEP_COUNTED,
        ),
        Misconception(
            "one_scale_per_tensor", "one scale for the whole tensor",
            "A scale is shared by the numbers of one tile only: with one scale for everything, a tile of small "
            "numbers gets the step of the largest number anywhere, and most of its numbers round to 0.",
            _TILE,
        ),
        Misconception(
            "scale_from_the_mean", "a scale from the mean magnitude",
            "The scale maps the tile's largest magnitude to the largest code, so that no number is clipped; a "
            "scale from the mean (or any smaller statistic) gives a finer step but clamps every number above it.",
            _TILE,
        ),
        Misconception(
            "cast_before_rounding", "cast to an integer before rounding",
            "Converting a float to an integer type (`.to(torch.int8)`, `.long()`) truncates toward zero; a code is "
            "the nearest integer, so round first (`torch.round`), then clamp to the codes, then store. (Clamping "
            "before or after rounding gives the same codes when the bounds are integers: the order that matters "
            "is rounding before the cast.)",
            _TILE,
        ),
        Misconception(
            "positions_from_padding", "positions counted from the padding",
            "A prompt's first token is at position 0 whether or not padding precedes it: it is the prompt decoded "
            "alone that the batch must reproduce. Counting the padding shifts the whole row; RoPE, which sees only "
            "distances, forgives that, but a model that reads a position absolutely (learned positions, Llama 4's "
            "NoPE temperature) does not.",
            _PADDED,
        ),
        Misconception(
            "one_length_for_all_rows", "one length for every row",
            "Each row of a left-padded batch has its own padding, `T - lengths[b]` slots: positions taken from one "
            "row's length are right for that row only.",
            _PADDED,
        ),
        Misconception(
            "first_real_at_one", "off by one at the first real token",
            "Positions count from 0: the first real token is at 0, as in the prompt decoded alone "
            "(`attention_mask.cumsum(-1) - 1`, not the cumulative sum itself).",
            _PADDED,
        ),
        Misconception(
            "positions_across_the_row", "positions counted across the packed row",
            "The packed row is not one sequence: it lays several requests end to end, and RoPE must rotate each "
            "token by its place in its own request. Counted across the row, a request's tokens sit far from its "
            "own cached keys, at distances it never had alone.",
            _PACKED,
        ),
        Misconception(
            "positions_ignore_the_cache", "new tokens counted from 0",
            "A request's new tokens follow what its cache already holds: a decoding request's one token is at its "
            "cached length, a prompt's next chunk continues where the last one stopped.",
            _PACKED,
        ),
        Misconception(
            "one_past_the_cache", "one past the cache",
            "Positions count from 0, so a cache holding `c` positions holds `0 .. c - 1`: the next token is at `c`, "
            "the cache's length itself.",
            _PACKED,
        ),
        Misconception(
            "tree_causal_by_index", "a tree checked with the causal mask",
            "The drafts of a tree are alternatives: two siblings are two guesses for the same place, so neither may "
            "see the other. A draft sees the cache and, among the drafts, only the path from the root to itself; "
            "the causal mask lets it see every earlier draft, and its logits are no longer its path's.",
            _TREE,
        ),
        Misconception(
            "tree_positions_by_index", "draft positions by index",
            "A draft's position is where its token would sit in the text: the cache's length plus its depth in the "
            "tree. Siblings share a position; a draft's index in the list is not its place in the text.",
            _TREE,
        ),
        Misconception(
            "draft_cannot_see_prompt", "drafts that cannot see the cached prompt",
            "The drafts continue the cached text: each query sees every cached key, as a decoded token does, and "
            "the tree's rule only narrows what it sees among the drafts.",
            _TREE,
        ),
        Misconception(
            "merge_without_reweighting", "outputs added without reweighting",
            "Each partial output is already normalised over its own keys (its weights sum to 1), so two added "
            "weigh as two whole softmaxes. Over all the keys, state i's keys hold the share exp(lse_i - lse) of the "
            "softmax: multiply each output by its share before adding.",
            _MERGE,
        ),
        Misconception(
            "max_for_logaddexp", "the larger log-sum-exp kept instead of their logaddexp",
            "The merged log-sum-exp is the log of the two sums added, log(exp(lse1) + exp(lse2)): larger than "
            "either. max(lse1, lse2) is the online softmax's running max, not its sum; weights exp(lse_i - max) "
            "then add up to more than 1.",
            _MERGE,
        ),
        Misconception(
            "empty_state_forgotten", "the empty state forgotten",
            "A query can see no key in either state (a split wholly outside its window, a padded query): both "
            "log-sum-exps are -inf, and exp(lse_i - lse) is exp(-inf - (-inf)) = NaN. The empty state must change "
            "nothing: shift by 0 where the merged log-sum-exp is -inf, so its weight is exp(-inf) = 0.",
            _MERGE,
        ),
    )
}


# --------------------------------------------------------------------------- the wrong functions


def _split_view_only(x: Tensor, num_heads: int) -> Tensor:
    B, T, D = x.shape
    return x.reshape(B, num_heads, T, D // num_heads)  # right shape, wrong elements


def _merge_view_only(y: Tensor) -> Tensor:
    B, H, T, E = y.shape
    return y.reshape(B, T, H * E)  # no transpose back


def _split_interleaved(x: Tensor, num_heads: int) -> Tensor:
    B, T, D = x.shape
    return x.view(B, T, D // num_heads, num_heads).permute(0, 3, 1, 2)  # head h gets features h, h + H, ...


def _merge_interleaved(y: Tensor) -> Tensor:
    B, H, T, E = y.shape
    return y.permute(0, 2, 3, 1).reshape(B, T, E * H)  # the inverse of _split_interleaved


def _causal_top_left(T: int, S: int) -> Tensor:
    return torch.ones(T, S, dtype=torch.bool).tril()  # diagonal 0: top-left


def _causal_inverted(T: int, S: int) -> Tensor:
    return ~solutions.causal_mask(T, S)  # True = blocked


def _padding_inverted(lengths: list[int], S: int) -> Tensor:
    return ~solutions.padding_mask(lengths, S)  # True = padding, nn.MultiheadAttention's key_padding_mask


def _mod_top_left(q_idx: Tensor, kv_idx: Tensor, T: int, S: int) -> Tensor:
    return q_idx >= kv_idx  # FlexAttention's documented causal mask_mod: top-left when T < S


def _sink_added_to_scores(q: Tensor, k: Tensor, v: Tensor, sinks: Tensor) -> Tensor:
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q, k, v, score_mod=lambda s, b, h, q_idx, kv_idx: s + sinks[h])  # a constant per row


def _sink_normalised_per_score(q: Tensor, k: Tensor, v: Tensor, sinks: Tensor) -> Tensor:
    from torch.nn.attention.flex_attention import flex_attention

    return flex_attention(q, k, v, score_mod=lambda s, b, h, q_idx, kv_idx: torch.sigmoid(s - sinks[h]))


def _masked_softmax_nan(scores: Tensor, mask: Tensor) -> Tensor:
    return torch.softmax(scores.masked_fill(~mask, _NEG_INF), dim=-1)  # a fully masked row: NaN


def _masked_softmax_renormalised(scores: Tensor, mask: Tensor) -> Tensor:
    p = torch.softmax(scores, dim=-1) * mask  # every key, then the hidden ones zeroed
    return p / p.sum(dim=-1, keepdim=True)  # a fully masked row: 0 / 0 = NaN


def _masked_softmax_inverted(scores: Tensor, mask: Tensor) -> Tensor:
    return solutions.masked_softmax(scores, ~mask)


def _masked_softmax_queries(scores: Tensor, mask: Tensor) -> Tensor:
    s = scores.masked_fill(~mask, _NEG_INF).transpose(-2, -1)  # softmax over T, via the same zero-safe softmax
    return solutions.masked_softmax(s, torch.isfinite(s)).transpose(-2, -1)


def _masked_softmax_queries_plain(scores: Tensor, mask: Tensor) -> Tensor:
    return torch.softmax(scores.masked_fill(~mask, _NEG_INF), dim=-2)  # a key no query sees: NaN


def _mha(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor | None, num_heads: int, *,
         split: Callable[[Tensor, int], Tensor] = solutions.split_heads,
         merge: Callable[[Tensor], Tensor] = solutions.merge_heads, softmax_dim: int = -1) -> Tensor:
    """Multi-head attention by hand, with one part swappable for a wrong one."""
    q, k, v = (split(x @ w.T, num_heads) for w in (w_q, w_k, w_v))  # (B, H, T, E)
    weights = torch.softmax((q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1]), dim=softmax_dim)  # (B, H, T, T)
    y = merge(weights @ v)  # (B, T, D)
    return y if w_o is None else y @ w_o.T


def _mha_no_w_o(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor, num_heads: int) -> Tensor:
    return _mha(x, w_q, w_k, w_v, None, num_heads)


def _mha_view_only(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor, num_heads: int) -> Tensor:
    return _mha(x, w_q, w_k, w_v, w_o, num_heads, split=_split_view_only, merge=_merge_view_only)


def _mha_interleaved(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor, num_heads: int) -> Tensor:
    return _mha(x, w_q, w_k, w_v, w_o, num_heads, split=_split_interleaved, merge=_merge_interleaved)


def _mha_queries(x: Tensor, w_q: Tensor, w_k: Tensor, w_v: Tensor, w_o: Tensor, num_heads: int) -> Tensor:
    return _mha(x, w_q, w_k, w_v, w_o, num_heads, softmax_dim=-2)


def _params_no_w_o(d_model: int, num_heads: int, num_kv_heads: int, bias: bool) -> int:
    kv = num_kv_heads * (d_model // num_heads)
    return (d_model + 2 * kv) * (d_model + int(bias))  # W_Q, W_K, W_V only


def _params_kv_full(d_model: int, num_heads: int, num_kv_heads: int, bias: bool) -> int:
    return 4 * d_model * (d_model + int(bias))  # as if K == H


def _arithmetic_full_width(d_model: int, num_heads: int) -> dict[str, int]:
    return {"head_dim": d_model, "w_q_one_head": d_model * d_model, "w_q_all_heads": num_heads * d_model * d_model,
            "concat_width": num_heads * d_model, "w_o": num_heads * d_model * d_model}


def _gqa(q: Tensor, k: Tensor, v: Tensor, *, interleave: bool = True, softmax_dim: int = -1) -> Tensor:
    n_rep = q.shape[1] // k.shape[1]
    if interleave:
        k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)  # (B, H, S, E)
    else:
        k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)  # head h reads KV head h % K
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=softmax_dim)
    return weights @ v


def _gqa_repeat(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return _gqa(q, k, v, interleave=False)


def _gqa_queries(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    return _gqa(q, k, v, softmax_dim=-2)


def _decode_top_left(q: Tensor, k_new: Tensor, v_new: Tensor, k_cache: Tensor, v_cache: Tensor,
                     position: int) -> Tensor:
    T = q.shape[2]
    k_cache[:, :, position : position + T] = k_new
    v_cache[:, :, position : position + T] = v_new
    k, v = k_cache[:, :, : position + T], v_cache[:, :, : position + T]
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)  # top-left when T < S


def _decode_slot_late(q: Tensor, k_new: Tensor, v_new: Tensor, k_cache: Tensor, v_cache: Tensor,
                      position: int) -> Tensor:
    T = q.shape[2]
    k_cache[:, :, position + 1 : position + 1 + T] = k_new  # one slot too far: slot `position` stays empty
    v_cache[:, :, position + 1 : position + 1 + T] = v_new
    k, v = k_cache[:, :, : position + 1 + T], v_cache[:, :, : position + 1 + T]
    return attention_bottom_right(q, k, v)


def _decode_one_short(q: Tensor, k_new: Tensor, v_new: Tensor, k_cache: Tensor, v_cache: Tensor,
                      position: int) -> Tensor:
    T = q.shape[2]
    k_cache[:, :, position : position + T] = k_new
    v_cache[:, :, position : position + T] = v_new
    k, v = k_cache[:, :, : position + T - 1], v_cache[:, :, : position + T - 1]  # misses the newest slot
    return attention_bottom_right(q, k, v)


def attention_bottom_right(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """Causal attention with the mask aligned bottom-right (a query that sees no key gets zeros)."""
    T, S = q.shape[2], k.shape[2]
    mask = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return solutions.masked_softmax(scores, mask) @ v


def _online_stats(x: Tensor, block_size: int, *, rescale: bool, safe: bool) -> Tensor:
    m = torch.full(x.shape[:-1], _NEG_INF, dtype=x.dtype)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start : start + block_size]
        m_new = torch.maximum(m, block.amax(dim=-1))
        shift = torch.where(m_new == _NEG_INF, torch.zeros_like(m_new), m_new) if safe else m_new
        old = l * torch.exp(m - shift) if rescale else l
        l = old + torch.exp(block - shift[..., None]).sum(dim=-1)
        m = m_new
    if not safe:
        return torch.exp(x - m[..., None]) / l[..., None]
    shift = torch.where(m == _NEG_INF, torch.zeros_like(m), m)
    return torch.exp(x - shift[..., None]) / torch.where(l > 0, l, torch.ones_like(l))[..., None]


def _online_no_rescale(x: Tensor, block_size: int) -> Tensor:
    return _online_stats(x, block_size, rescale=False, safe=True)


def _online_nan(x: Tensor, block_size: int) -> Tensor:
    return _online_stats(x, block_size, rescale=True, safe=False)


def _online_whole_rows(x: Tensor, block_size: int) -> Tensor:
    return solutions.online_softmax(x, x.shape[-1])  # one block: the whole row


def _online_torch_softmax(x: Tensor, block_size: int) -> Tensor:
    return torch.softmax(x, dim=-1)  # a row of only -inf: NaN


def _absorb_wrong_order(q_nope: Tensor, w_uk: Tensor) -> Tensor:
    H, E = q_nope.shape[1], q_nope.shape[-1]
    w = w_uk.view(E, H, w_uk.shape[-1]).transpose(0, 1)  # (H, E, C) with rows dealt out head-minor
    return torch.einsum("bhte,hec->bhtc", q_nope, w)


def _softcap_after_mask(scores: Tensor, mask: Tensor, cap: float) -> Tensor:
    masked = scores.masked_fill(~mask, _NEG_INF)
    return torch.softmax(cap * torch.tanh(masked / cap), dim=-1)  # a hidden -inf comes back as -cap


def _sink_first(q: Tensor, k: Tensor, v: Tensor, sinks: Tensor, mask: Tensor) -> Tensor:
    scores = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).masked_fill(~mask, _NEG_INF)  # (B, H, T, S)
    sink = sinks[:, None, None].expand(*scores.shape[:-1], 1)
    weights = torch.softmax(torch.cat([sink, scores], dim=-1), dim=-1)  # the sink's column first ...
    return weights[..., :-1] @ v  # ... and the last key's column dropped


def _rope_rotate_half(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def _norm_after_rope(q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    q, k = _rope_rotate_half(q, cos, sin), _rope_rotate_half(k, cos, sin)  # RoPE first ...
    q = q * torch.rsqrt(q.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * q_weight  # ... then the norm
    k = k * torch.rsqrt(k.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * k_weight
    return q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])


def _gate_after_w_o(x: Tensor, heads: Tensor, w_g: Tensor, w_o: Tensor) -> Tensor:
    B, H, T, E = heads.shape
    y = heads.transpose(1, 2).reshape(B, T, H * E)
    return (y @ w_o.T) * torch.sigmoid(x @ w_g.T)  # the gate on W_O's output


def _delta_parts(state: Tensor, k: Tensor, g: Tensor) -> tuple[Tensor, Tensor]:
    decayed = state * torch.exp(g)[..., None, None]  # (B, H, Dk, Dv)
    return decayed, torch.einsum("bhkv,bhk->bhv", decayed, k)  # and what it holds for k, (B, H, Dv)


def _gate_after_write(state: Tensor, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor) -> Tensor:
    recalled = torch.einsum("bhkv,bhk->bhv", state, k)
    new = state + k[..., :, None] * (beta[..., None] * (v - recalled))[..., None, :]
    state.copy_(new * torch.exp(g)[..., None, None])  # the decay last: it shrinks the new write too
    return torch.einsum("bhkv,bhk->bhv", state, q)


def _no_erase(state: Tensor, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor) -> Tensor:
    decayed, _ = _delta_parts(state, k, g)
    state.copy_(decayed + k[..., :, None] * (beta[..., None] * v)[..., None, :])  # no - S^T k
    return torch.einsum("bhkv,bhk->bhv", state, q)


def _read_before_write(state: Tensor, q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor) -> Tensor:
    decayed, recalled = _delta_parts(state, k, g)
    out = torch.einsum("bhkv,bhk->bhv", decayed, q)  # read before the write
    state.copy_(decayed + k[..., :, None] * (beta[..., None] * (v - recalled))[..., None, :])
    return out


def _indexer_parts(q: Tensor, k: Tensor, weights: Tensor, relu: bool = True) -> tuple[Tensor, Tensor]:
    dots = torch.einsum("bhtd,bsd->bhts", q, k)  # (B, Hi, T, S)
    per_head = weights[..., None] * (torch.relu(dots) if relu else dots)  # (B, Hi, T, S)
    T, S = q.shape[2], k.shape[1]
    return per_head, torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)


def _pick(scores: Tensor, top_k: int, visible: Tensor, dim: int = -1) -> Tensor:
    best = scores.masked_fill(~visible, float("-inf")).topk(top_k, dim=dim).indices
    return torch.zeros(scores.shape, dtype=torch.bool).scatter_(dim, best, True) & visible


def _top_k_over_queries(q: Tensor, k: Tensor, weights: Tensor, top_k: int) -> Tensor:
    per_head, visible = _indexer_parts(q, k, weights)
    return _pick(per_head.sum(dim=1), top_k, visible, dim=-2)[:, None]  # each key picks its queries


def _causal_after_pick(q: Tensor, k: Tensor, weights: Tensor, top_k: int) -> Tensor:
    per_head, visible = _indexer_parts(q, k, weights)
    everything = torch.ones_like(visible)
    return (_pick(per_head.sum(dim=1), top_k, everything) & visible)[:, None]  # the pick saw the future keys


def _pick_per_head(q: Tensor, k: Tensor, weights: Tensor, top_k: int) -> Tensor:
    per_head, visible = _indexer_parts(q, k, weights)
    return _pick(per_head, top_k, visible).any(dim=1, keepdim=True)  # each indexer head's pick, merged


def _no_relu(q: Tensor, k: Tensor, weights: Tensor, top_k: int) -> Tensor:
    per_head, visible = _indexer_parts(q, k, weights, relu=False)
    return _pick(per_head.sum(dim=1), top_k, visible)[:, None]


def _rope_pairs_turned(x1: Tensor, x2: Tensor, c: Tensor, s: Tensor) -> Tensor:
    return torch.stack([x1 * c - x2 * s, x2 * c + x1 * s], dim=-1)  # (..., T, E/2, 2)


def _rope_rotate_half_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    return _rope_rotate_half(x, cos, sin)  # pairs (i, i + E/2)


def _rope_pairs_out_of_place(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    out = _rope_pairs_turned(x[..., 0::2], x[..., 1::2], cos[..., :half], sin[..., :half])
    return torch.cat([out[..., 0], out[..., 1]], dim=-1)  # first features, then second features


def _rope_angle_from_column_2i(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    out = _rope_pairs_turned(x[..., 0::2], x[..., 1::2], cos[..., 0::2], sin[..., 0::2])
    return out.flatten(-2)


def _rope_turned_backwards(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    half = x.shape[-1] // 2
    out = _rope_pairs_turned(x[..., 0::2], x[..., 1::2], cos[..., :half], -sin[..., :half])
    return out.flatten(-2)


def _intensity(flops: int, read: int) -> dict[str, float]:
    return {"flops": flops, "bytes": read, "intensity": flops / read}


def _intensity_per_query_head(B: int, H: int, K: int, E: int, S: int, b: int) -> dict[str, float]:
    return _intensity(4 * B * H * S * E, 2 * B * H * S * E * b)  # K and V counted for every query head


def _intensity_no_v_bytes(B: int, H: int, K: int, E: int, S: int, b: int) -> dict[str, float]:
    return _intensity(4 * B * H * S * E, B * K * S * E * b)  # the keys' bytes alone


def _intensity_no_v(B: int, H: int, K: int, E: int, S: int, b: int) -> dict[str, float]:
    return _intensity(2 * B * H * S * E, B * K * S * E * b)  # the scores alone, and the keys alone


def _intensity_mac_one_flop(B: int, H: int, K: int, E: int, S: int, b: int) -> dict[str, float]:
    return _intensity(2 * B * H * S * E, 2 * B * K * S * E * b)  # 1 FLOP per multiply-add


def _tile(m: Tensor, l: Tensor, acc: Tensor, s: Tensor, v: Tensor, *, rescale_l: bool = True,
          rescale_acc: bool = True, inverted: bool = False, safe: bool = True) -> dict[str, Tensor]:
    m_new = torch.maximum(m, s.amax(dim=-1))
    shift = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new) if safe else m_new
    p = torch.exp(s - shift[:, None])
    alpha = torch.exp(shift - m) if inverted else torch.exp(m - shift)
    l_new = (alpha * l if rescale_l else l) + p.sum(dim=-1)
    return {"m": m_new, "l": l_new, "acc": (alpha[:, None] * acc if rescale_acc else acc) + p @ v}


def _tile_acc_not_rescaled(m: Tensor, l: Tensor, acc: Tensor, s: Tensor, v: Tensor) -> dict[str, Tensor]:
    return _tile(m, l, acc, s, v, rescale_acc=False)


def _tile_no_rescale(m: Tensor, l: Tensor, acc: Tensor, s: Tensor, v: Tensor) -> dict[str, Tensor]:
    return _tile(m, l, acc, s, v, rescale_l=False, rescale_acc=False)


def _tile_inverted(m: Tensor, l: Tensor, acc: Tensor, s: Tensor, v: Tensor) -> dict[str, Tensor]:
    return _tile(m, l, acc, s, v, inverted=True)


def _tile_nan(m: Tensor, l: Tensor, acc: Tensor, s: Tensor, v: Tensor) -> dict[str, Tensor]:
    return _tile(m, l, acc, s, v, safe=False)


def _key_ends(T: int, S: int, block_q: int, *, offset: int, first: bool = False, clamp: bool = True) -> list[int]:
    ends = []
    for i in range(math.ceil(T / block_q)):
        end = (i * block_q + 1 if first else (i + 1) * block_q) + offset
        ends.append(min(max(end, 0), S) if clamp else end)
    return ends


def _key_ends_top_left(T: int, S: int, block_q: int) -> list[int]:
    return _key_ends(T, S, block_q, offset=0)


def _key_ends_first_query(T: int, S: int, block_q: int) -> list[int]:
    return _key_ends(T, S, block_q, offset=S - T, first=True)


def _key_ends_not_clamped(T: int, S: int, block_q: int) -> list[int]:
    return _key_ends(T, S, block_q, offset=S - T, clamp=False)


def _key_ends_last_key(T: int, S: int, block_q: int) -> list[int]:
    return _key_ends(T, S, block_q, offset=S - T - 1)


def _lse2(x: Tensor, block_size: int, *, log2e: bool = True, natural: bool = True, with_max: bool = True,
          safe: bool = True) -> Tensor:
    c = 1 / math.log(2) if log2e else 1.0
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for start in range(0, x.shape[-1], block_size):
        block = x[..., start : start + block_size] * c
        m_new = torch.maximum(m, block.amax(dim=-1))
        shift = torch.where(m_new == float("-inf"), torch.zeros_like(m_new), m_new) if safe else m_new
        l = l * torch.exp2(m - shift) + torch.exp2(block - shift[..., None]).sum(dim=-1)
        m = m_new
    lse = (m + torch.log2(l)) if with_max else torch.log2(l)
    return lse * math.log(2) if natural else lse


def _lse_base_2(x: Tensor, block_size: int) -> Tensor:
    return _lse2(x, block_size, natural=False)


def _lse_natural_exp2(x: Tensor, block_size: int) -> Tensor:
    return _lse2(x, block_size, log2e=False)


def _lse_no_max(x: Tensor, block_size: int) -> Tensor:
    return _lse2(x, block_size, with_max=False)


def _lse_nan(x: Tensor, block_size: int) -> Tensor:
    return _lse2(x, block_size, safe=False)


def _lse_whole_rows(x: Tensor, block_size: int) -> Tensor:
    return torch.logsumexp(x, dim=-1)  # over each whole row at once


def _tree_seen(parents: list[int]) -> Tensor:
    seen = torch.eye(len(parents), dtype=torch.bool)
    for i, p in enumerate(parents):
        if p >= 0:
            seen[i] |= seen[p]
    return seen


def _tree_causal(parents: list[int], cached: int) -> tuple[Tensor, Tensor]:
    n, seen = len(parents), _tree_seen(parents)
    keep = torch.ones(n, cached + n, dtype=torch.bool).tril(cached)  # causal by index: every earlier draft
    return keep, cached + seen.sum(dim=1) - 1


def _tree_positions_by_index(parents: list[int], cached: int) -> tuple[Tensor, Tensor]:
    n, seen = len(parents), _tree_seen(parents)
    return torch.cat([torch.ones(n, cached, dtype=torch.bool), seen], dim=1), cached + torch.arange(n)


def _tree_prompt_hidden(parents: list[int], cached: int) -> tuple[Tensor, Tensor]:
    n, seen = len(parents), _tree_seen(parents)
    return torch.cat([torch.zeros(n, cached, dtype=torch.bool), seen], dim=1), cached + seen.sum(dim=1) - 1


def _tile_with(x: Tensor, bits: int, tile: int, largest_of: Callable[[Tensor], Tensor],
               to_code: Callable[[Tensor], Tensor]) -> Tensor:
    tiles = x.reshape(*x.shape[:-1], -1, tile)
    q: int = 2 ** (bits - 1) - 1
    scale = largest_of(tiles) / q
    return (to_code(tiles / scale).clamp(-q - 1, q) * scale).reshape(x.shape)


def _tile_per_tensor(x: Tensor, bits: int, tile: int) -> Tensor:
    return _tile_with(x, bits, tile, lambda t: t.abs().amax(), torch.round)  # one scale for everything


def _tile_mean_scale(x: Tensor, bits: int, tile: int) -> Tensor:
    return _tile_with(x, bits, tile, lambda t: t.abs().mean(dim=-1, keepdim=True), torch.round)


def _tile_truncated(x: Tensor, bits: int, tile: int) -> Tensor:
    return _tile_with(x, bits, tile, lambda t: t.abs().amax(dim=-1, keepdim=True),
                      lambda y: y.clamp(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1).to(torch.int8).float())


def _positions_from_padding(lengths: list[int], T: int) -> Tensor:
    return torch.arange(T).expand(len(lengths), T)  # every row from slot 0, its padding counted


def _one_length(lengths: list[int], T: int) -> Tensor:
    return (torch.arange(T) - (T - lengths[0])).clamp(min=0).expand(len(lengths), T)  # the first row's padding


def _first_real_at_one(lengths: list[int], T: int) -> Tensor:
    return (torch.arange(T) - (T - torch.tensor(lengths)[:, None]) + 1).clamp(min=0)  # 1 at the first real token


def _across_the_row(cached: list[int], new: list[int]) -> Tensor:
    return torch.arange(sum(new))  # the row's slots, as if it were one sequence


def _from_zero(cached: list[int], new: list[int]) -> Tensor:
    return torch.cat([torch.arange(n) for n in new])  # each request's new tokens from 0, its cache forgotten


def _one_past(cached: list[int], new: list[int]) -> Tensor:
    return torch.cat([torch.arange(c + 1, c + n + 1) for c, n in zip(cached, new, strict=True)])


def _merged(o1: Tensor, lse1: Tensor, o2: Tensor, lse2: Tensor, shift: Tensor) -> Tensor:
    return torch.exp(lse1 - shift)[..., None] * o1 + torch.exp(lse2 - shift)[..., None] * o2


def _merge_added(o1: Tensor, lse1: Tensor, o2: Tensor, lse2: Tensor) -> tuple[Tensor, Tensor]:
    return o1 + o2, torch.logaddexp(lse1, lse2)  # each output still normalised over its own keys


def _merge_max(o1: Tensor, lse1: Tensor, o2: Tensor, lse2: Tensor) -> tuple[Tensor, Tensor]:
    top = torch.maximum(lse1, lse2)  # the running max, not the log of the summed exponentials
    shift = torch.where(torch.isneginf(top), torch.zeros_like(top), top)
    return _merged(o1, lse1, o2, lse2, shift), top


def _merge_nan_empty(o1: Tensor, lse1: Tensor, o2: Tensor, lse2: Tensor) -> tuple[Tensor, Tensor]:
    lse = torch.logaddexp(lse1, lse2)
    return _merged(o1, lse1, o2, lse2, lse), lse  # two empty states: exp(-inf - (-inf)) = NaN


# --------------------------------------------------------------------------- the scale mistakes, as data


@dataclass(frozen=True)
class ScaleMistake:
    """A wrong score scale, as the factor it multiplies every right score by, given the head size E and the
    head count H: for the scores themselves, yours / expected is that factor at every entry."""

    misconception: str
    suffix: str  # of the variants' keys
    factor: Callable[[int, int], float]
    what: str


@dataclass(frozen=True)
class ScaledExercise:
    """An exercise whose scores can be scaled wrongly: ``query_arg`` is the argument (the query, or ``W_Q``)
    that the scores are linear in, ``sizes`` reads ``(E, H)`` from the arguments."""

    exercise: str
    prefix: str  # of the variants' keys
    query_arg: int
    sizes: Callable[..., tuple[int, int]]


SCALE_MISTAKES: tuple[ScaleMistake, ...] = (
    ScaleMistake("missing_scale", "no_scale", lambda E, H: math.sqrt(E),
                 "left the scores unscaled (`q @ k.transpose(-2, -1)`): yours are `sqrt(E)` times the right ones"),
    ScaleMistake("scale_by_e", "div_e", lambda E, H: 1 / math.sqrt(E),
                 "divided the scores by `E` instead of `sqrt(E)`: yours are the right ones divided by `sqrt(E)`"),
    ScaleMistake("scale_by_d_model", "sqrt_d_model", lambda E, H: 1 / math.sqrt(H),
                 "divided the scores by `sqrt(H * E) = sqrt(d_model)` instead of `sqrt(E)`"),
)
SCALED_EXERCISES: tuple[ScaledExercise, ...] = (
    ScaledExercise("attention_scores", "scores", 0, lambda q, k: (q.shape[-1], q.shape[1])),
    ScaledExercise("mha_forward", "mha", 1, lambda x, w_q, w_k, w_v, w_o, h: (x.shape[-1] // h, h)),
    ScaledExercise("gqa_attention", "gqa", 0, lambda q, k, v: (q.shape[-1], q.shape[1])),
    ScaledExercise("decode_step", "decode", 0, lambda q, *rest: (q.shape[-1], q.shape[1])),
)


def _wrongly_scaled(where: ScaledExercise, mistake: ScaleMistake) -> Callable[..., object]:
    """The answer computed with the wrong scale: the package's answer with the query (or ``W_Q``) multiplied
    by the mistake's factor, which multiplies every score by it. Outputs after a softmax are not the right
    ones times a constant, so the checker compares with this, never with a ratio."""
    reference = getattr(solutions, where.exercise)

    def wrong(*args: object) -> object:
        E, H = where.sizes(*args)
        scaled = list(args)
        scaled[where.query_arg] = args[where.query_arg] * mistake.factor(E, H)  # type: ignore[operator]
        return reference(*scaled)

    wrong.__name__ = f"_{where.prefix}_{mistake.suffix}"
    return wrong


_SCALE_VARIANTS = tuple(
    Variant(where.exercise, f"{where.prefix}_{m.suffix}", m.misconception, m.what, _wrongly_scaled(where, m))
    for where in SCALED_EXERCISES
    for m in SCALE_MISTAKES
)

VARIANTS: tuple[Variant, ...] = (
    Variant("split_heads", "split_reshape_only", "view_without_transpose",
            "reshaped `(B, T, D)` straight to `(B, H, T, E)`, without `view(B, T, H, E)` then `transpose(1, 2)`",
            _split_view_only),
    Variant("split_heads", "split_interleaved", "heads_not_head_major",
            "split the last dim as `view(B, T, E, H)`: head `h` got features `h`, `h + H`, `h + 2H` and so on "
            "instead of the block `h * E .. h * E + E - 1`", _split_interleaved),
    Variant("merge_heads", "merge_reshape_only", "view_without_transpose",
            "reshaped `(B, H, T, E)` straight to `(B, T, H * E)`, without `transpose(1, 2)` first", _merge_view_only),
    Variant("merge_heads", "merge_interleaved", "heads_not_head_major",
            "put feature `e` of head `h` at `e * H + h` (the heads interleaved) instead of at `h * E + e`",
            _merge_interleaved),
    Variant("causal_mask", "causal_top_left", "top_left_causal",
            "used `tril()` without the offset `S - T`: the triangle starts at the top left", _causal_top_left),
    Variant("causal_mask", "causal_inverted", "inverted_polarity",
            "returned `True` where the key is hidden (`True` = blocked)", _causal_inverted),
    Variant("padding_mask", "padding_inverted", "inverted_polarity",
            "returned `True` at the padding (`nn.MultiheadAttention`'s `key_padding_mask` convention)",
            _padding_inverted),
    Variant("masked_softmax", "softmax_nan_rows", "nan_rows",
            "filled hidden scores with `-inf` and took a plain softmax: a fully masked row gives `NaN`",
            _masked_softmax_nan),
    Variant("masked_softmax", "softmax_renormalised_nan_rows", "nan_rows",
            "took a softmax over every key, multiplied it by the mask and divided by each row's sum: a fully masked "
            "row gives `0 / 0 = NaN`", _masked_softmax_renormalised),
    Variant("masked_softmax", "softmax_inverted", "inverted_polarity",
            "hid the keys where the mask is `True` (`True` = blocked)", _masked_softmax_inverted),
    Variant("masked_softmax", "softmax_queries", "softmax_over_queries",
            "took the softmax over `dim=-2` (the queries)", _masked_softmax_queries),
    Variant("masked_softmax", "softmax_queries_plain", "softmax_over_queries",
            "took a plain softmax over `dim=-2` (the queries): a key that no query may see gives `NaN`",
            _masked_softmax_queries_plain),
    Variant("mha_forward", "mha_no_w_o", "forgot_w_o", "returned the concatenated heads without applying `w_o`",
            _mha_no_w_o),
    Variant("mha_forward", "mha_reshape_only", "view_without_transpose",
            "split and merged the heads with a reshape alone, no transpose", _mha_view_only),
    Variant("mha_forward", "mha_interleaved", "heads_not_head_major",
            "split the width as `(E, H)` and merged it back the same way: head `h` got features `h`, `h + H` and so on",
            _mha_interleaved),
    Variant("mha_forward", "mha_softmax_queries", "softmax_over_queries", "took the softmax over the queries",
            _mha_queries),
    Variant("mha_param_count", "params_no_w_o", "forgot_w_o", "counted `W_Q`, `W_K` and `W_V` but not `W_O`",
            _params_no_w_o),
    Variant("mha_param_count", "params_kv_full", "kv_heads_full",
            "counted `W_K` and `W_V` as `d_model x d_model` whatever `num_kv_heads` is", _params_kv_full),
    Variant("dimension_arithmetic", "arithmetic_full_width", "heads_at_full_width",
            "gave every head the full width `d_model`", _arithmetic_full_width),
    Variant("gqa_attention", "gqa_repeat", "repeat_not_interleave",
            "lined the KV heads up with `k.repeat(1, n_rep, 1, 1)`: query head `h` reads KV head `h % K`", _gqa_repeat),
    Variant("gqa_attention", "gqa_softmax_queries", "softmax_over_queries", "took the softmax over the queries",
            _gqa_queries),
    Variant("decode_step", "decode_top_left", "top_left_causal",
            "used `F.scaled_dot_product_attention(..., is_causal=True)`, which aligns the mask top-left when `T < S`",
            _decode_top_left),
    Variant("decode_step", "decode_slot_late", "off_by_one_cache",
            "wrote the new keys and values one slot late (from `position + 1`) and attended to one slot too many",
            _decode_slot_late),
    Variant("decode_step", "decode_one_short", "off_by_one_cache",
            "attended to `position + T - 1` slots: the newest key and value are left out", _decode_one_short),
    Variant("online_softmax", "online_no_rescale", "no_rescale",
            "added each block's sum without multiplying the running sum by `exp(m - m_new)`", _online_no_rescale),
    Variant("online_softmax", "online_nan_rows", "nan_rows",
            "shifted by the running maximum even when it is `-inf`: a row of only `-inf` gives `NaN`", _online_nan),
    Variant("online_softmax", "online_whole_rows", "not_block_by_block",
            "took the maximum and the sum over each whole row at once, ignoring `block_size`", _online_whole_rows),
    Variant("online_softmax", "online_torch_softmax", "not_block_by_block",
            "called `torch.softmax` on whole rows, ignoring `block_size` (and a row of only `-inf` gives `NaN`)",
            _online_torch_softmax),
    Variant("absorb_query", "absorb_wrong_order", "heads_not_head_major",
            "viewed `w_uk` as `(E, H, C)`: each head got every `H`-th row instead of a block of `E` rows",
            _absorb_wrong_order),
    Variant("softcapped_softmax", "softcap_after_mask", "cap_after_mask",
            "filled the hidden scores with `-inf` and then capped them: a hidden key came back with score `-cap`",
            _softcap_after_mask),
    Variant("sink_attention", "sink_first", "sink_weight_on_a_value",
            "put the sink's column first and dropped the last column: the sink's weight went to the first key's "
            "value and the last key's weight was lost", _sink_first),
    Variant("qk_norm_scores", "norm_after_rope", "norm_after_rope",
            "rotated the queries and keys with RoPE first and normalised them after", _norm_after_rope),
    Variant("gated_output", "gate_after_w_o", "gate_after_w_o",
            "applied `W_O` first and the gate to its output", _gate_after_w_o),
    Variant("delta_rule_step", "gate_after_write", "gate_after_write",
            "wrote first and decayed the state after the write", _gate_after_write),
    Variant("delta_rule_step", "no_erase", "no_erase",
            "wrote `beta * v` under the key without taking away what the state held for it", _no_erase),
    Variant("delta_rule_step", "read_before_write", "read_before_write",
            "let the query read the decayed state before this token's write", _read_before_write),
    Variant("indexer_top_k", "top_k_over_queries", "top_k_over_queries",
            "took the top-k along the queries' axis (`dim=-2`): each key picked its queries", _top_k_over_queries),
    Variant("indexer_top_k", "causal_after_pick", "causal_after_pick",
            "picked the top-k among all keys, the future ones too, and removed the hidden ones afterwards",
            _causal_after_pick),
    Variant("indexer_top_k", "pick_per_head", "pick_per_head",
            "picked each indexer head's top-k and kept a key if any head picked it", _pick_per_head),
    Variant("indexer_top_k", "no_relu", "no_relu",
            "summed the weighted dot products without the ReLU", _no_relu),
    Variant("causal_mask_mod", "mod_top_left", "top_left_causal",
            "returned `q_idx >= kv_idx`, FlexAttention's documented causal mask, which is top-left when `T < S`",
            _mod_top_left),
    Variant("flex_sink_attention", "sink_added_to_scores", "sink_in_scores",
            "added `sinks[h]` to every score in a `score_mod`: the softmax removes a constant per row, so the sink "
            "has no effect", _sink_added_to_scores),
    Variant("flex_sink_attention", "sink_normalised_per_score", "sink_in_scores",
            "turned each score into `sigmoid(score - sinks[h])` in a `score_mod` (each score against the sink "
            "alone, as `transformers` once did), which FlexAttention then softmaxes again", _sink_normalised_per_score),
    Variant("rope_interleaved", "rope_rotate_half_pairs", "rope_layout_swapped",
            "paired feature `i` with feature `i + E/2` (rotate-half) instead of `2i` with `2i + 1`",
            _rope_rotate_half_pairs),
    Variant("rope_interleaved", "rope_pairs_out_of_place", "pairs_out_of_place",
            "turned each pair `(2i, 2i + 1)` and returned all the first features, then all the second ones",
            _rope_pairs_out_of_place),
    Variant("rope_interleaved", "rope_angle_from_column_2i", "pair_angle_from_column_2i",
            "took pair `i`'s angle from column `2i` of `cos` and `sin` (`cos[..., 0::2]`)", _rope_angle_from_column_2i),
    Variant("rope_interleaved", "rope_turned_backwards", "rope_turned_backwards",
            "swapped the signs of the sines: every pair turned by minus its angle", _rope_turned_backwards),
    Variant("flash_tile_step", "tile_acc_not_rescaled", "acc_not_rescaled",
            "multiplied `l` by `exp(m - m_new)` but added the tile to `acc` without rescaling it",
            _tile_acc_not_rescaled),
    Variant("flash_tile_step", "tile_no_rescale", "no_rescale",
            "added the tile's sums to `l` and `acc` without multiplying either by `exp(m - m_new)`", _tile_no_rescale),
    Variant("flash_tile_step", "tile_rescale_inverted", "rescale_inverted",
            "multiplied what was summed by `exp(m_new - m)` instead of `exp(m - m_new)`", _tile_inverted),
    Variant("flash_tile_step", "tile_nan_rows", "nan_rows",
            "shifted by the running maximum even when it is `-inf`: a query that has seen only `-inf` gets `NaN`",
            _tile_nan),
    Variant("causal_key_ends", "key_ends_top_left", "top_left_causal",
            "left out the offset `S - T`: the block's last query `i` taken to see the keys up to `i`",
            _key_ends_top_left),
    Variant("causal_key_ends", "key_ends_first_query", "bound_from_first_query",
            "stopped at what the block's first query sees, `i_block * block_q + S - T + 1`", _key_ends_first_query),
    Variant("causal_key_ends", "key_ends_not_clamped", "end_not_clamped",
            "returned `(i_block + 1) * block_q + S - T` as it is: past `S` for a short last block, below 0 when "
            "`T > S`", _key_ends_not_clamped),
    Variant("causal_key_ends", "key_ends_last_key", "end_is_last_key",
            "returned the index of the last key seen, not one past it", _key_ends_last_key),
    Variant("lse_in_base_2", "lse_base_2", "lse_in_base_2",
            "returned `m + log2(l)` without multiplying by `ln 2`", _lse_base_2),
    Variant("lse_in_base_2", "lse_natural_exp2", "exp2_without_log2e",
            "took `exp2` of the scores as they are, without multiplying them by `log2(e)`", _lse_natural_exp2),
    Variant("lse_in_base_2", "lse_no_max", "lse_without_max",
            "returned `log2(l) * ln 2` without the running maximum", _lse_no_max),
    Variant("lse_in_base_2", "lse_nan_rows", "nan_rows",
            "shifted by the running maximum even when it is `-inf`: a row of only `-inf` gives `NaN`", _lse_nan),
    Variant("lse_in_base_2", "lse_whole_rows", "not_block_by_block",
            "took `torch.logsumexp` over each whole row at once, ignoring `block_size`", _lse_whole_rows),
    Variant("gqa_decode_intensity", "intensity_per_query_head", "kv_read_per_query_head",
            "counted the keys and values read once per query head (`num_heads`) instead of once per KV head",
            _intensity_per_query_head),
    Variant("gqa_decode_intensity", "intensity_no_v_bytes", "forgot_v",
            "counted the values' multiply-adds but not their bytes: only the keys were read", _intensity_no_v_bytes),
    Variant("gqa_decode_intensity", "intensity_no_v", "forgot_v",
            "left the values out: the scores' FLOPs and the keys' bytes alone", _intensity_no_v),
    Variant("gqa_decode_intensity", "intensity_mac_one_flop", "mac_as_one_flop",
            "counted each multiply-add as one FLOP", _intensity_mac_one_flop),
    Variant("merge_attention_states", "merge_outputs_added", "merge_without_reweighting",
            "added the two outputs as they are, `o1 + o2`", _merge_added),
    Variant("merge_attention_states", "merge_lse_max", "max_for_logaddexp",
            "took `torch.maximum(lse1, lse2)` as the merged log-sum-exp and weighted each output by "
            "`exp(lse_i - max)`", _merge_max),
    Variant("merge_attention_states", "merge_nan_for_empty", "empty_state_forgotten",
            "weighted each output by `exp(lse_i - lse)` even where both states are empty (`lse = -inf`), which "
            "gives NaN", _merge_nan_empty),
    Variant("draft_tree_mask", "tree_causal", "tree_causal_by_index",
            "let each draft see every earlier draft, causally by index, siblings and cousins included", _tree_causal),
    Variant("draft_tree_mask", "tree_positions_by_index", "tree_positions_by_index",
            "gave draft `i` the position `cached + i`, its index, not its depth", _tree_positions_by_index),
    Variant("draft_tree_mask", "tree_prompt_hidden", "draft_cannot_see_prompt",
            "hid the cached prompt from the drafts: each sees only its ancestors", _tree_prompt_hidden),
    Variant("quantize_tile", "tile_per_tensor", "one_scale_per_tensor",
            "took one scale for the whole tensor, its largest magnitude over the largest code", _tile_per_tensor),
    Variant("quantize_tile", "tile_mean_scale", "scale_from_the_mean",
            "took each tile's mean magnitude, not its largest, over the largest code", _tile_mean_scale),
    Variant("quantize_tile", "tile_truncated", "cast_before_rounding",
            "clamped `x / scale` and cast it to int8, which truncates toward zero, without rounding", _tile_truncated),
    Variant("left_padded_positions", "positions_from_padding", "positions_from_padding",
            "gave every row the positions `0 .. T - 1` of its slots, padding included", _positions_from_padding),
    Variant("left_padded_positions", "one_length", "one_length_for_all_rows",
            "took every row's padding from the first row's length", _one_length),
    Variant("left_padded_positions", "first_real_at_one", "first_real_at_one",
            "put each row's first real token at position 1", _first_real_at_one),
    Variant("packed_step_positions", "across_the_row", "positions_across_the_row",
            "numbered the packed row's slots `0 .. T - 1`", _across_the_row),
    Variant("packed_step_positions", "from_zero", "positions_ignore_the_cache",
            "started every request's new tokens at 0", _from_zero),
    Variant("packed_step_positions", "one_past", "one_past_the_cache",
            "started request `i`'s new tokens at `cached[i] + 1`", _one_past),
    *_SCALE_VARIANTS,
)
