"""Build-time helpers for the practice pages: flashcards, quiz and head-explorer data.

The pages' hidden ``markdown-exec`` blocks call these functions; ``tests/tools/test_practice_data.py`` calls
the same ones, so what the tests validate is exactly what the site renders.

* Flashcards and quiz questions live in ``docs/_data/flashcards.json`` and ``docs/_data/quiz.json``.
  Their text may hold ``{name}`` placeholders; :func:`computed_values` fills them with numbers computed
  by ``lessons_src`` when the site is built, so no derived number is typed into the data files.
* :func:`render_flashcards` and :func:`render_quiz` turn the data into HTML with the stable hooks the
  JavaScript (``docs/assets/js/practice.js``) and the browser tests use.
* :func:`pack_attention` turns attention weights ``(L, H, T, T)`` into the small JSON the head explorer
  embeds (weights as integer hundredths).
"""

from __future__ import annotations

import html
import json
import string
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "_data"
MIN_FLASHCARDS = 12
MIN_QUIZ = 8


# The parameters of the cache and mask questions: choices of the question, not derived numbers.
KV_MODEL = "Llama 2 70B"  # a GQA model whose cache size is not a round power of two
KV_CONTEXT = 4096  # tokens in the cache
GQA_MODEL, GQA_QUERY_HEAD = "Llama 3 8B", 13
MASK_T, MASK_S = 2, 6  # new tokens, keys (cached + new)
MLA_MODEL = "DeepSeek-V2"


def format_bytes(n: float) -> str:
    """``n`` bytes in the largest binary unit that leaves at least 1, to three significant digits."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:,.0f} bytes"


@cache
def computed_values() -> dict[str, str]:
    """Numbers the practice data refers to by name, computed by ``lessons_src`` (formatted with commas)."""
    import torch

    from lessons_src import MultiHeadAttention
    from lessons_src.functional import repeat_kv
    from lessons_src.kv_cache import kv_bytes_per_token, latent_bytes_per_token
    from lessons_src.lab.configs import load_configs
    from lessons_src.masks import causal_mask

    def n_params(m: Any) -> int:
        return sum(p.numel() for p in m.parameters())

    cfgs = load_configs()
    bert, mistral = cfgs["BERT-base"], cfgs["Mistral 7B"]
    m768 = MultiHeadAttention(768, 12)
    m1024_16 = MultiHeadAttention(1024, 16)
    m1024_32 = MultiHeadAttention(1024, 32)
    values: dict[str, int] = {
        "bert_d_model": bert.d_model,
        "bert_heads": bert.num_heads,
        "bert_layers": bert.num_layers,
        "bert_head_dim": bert.head_dim,
        "bert_maps": bert.num_layers * bert.num_heads,
        "bert_layers_plus_heads": bert.num_layers + bert.num_heads,  # a wrong answer: adding, not multiplying
        "bert_wo": m768.out_proj.weight.numel(),
        "mha768_params": n_params(m768),
        "hd_1024_16": m1024_16.head_dim,
        "hd_1024_32": m1024_32.head_dim,
        "d1024_times_16": m1024_16.d_model * m1024_16.num_heads,  # a wrong answer: multiplying, not dividing
        "wq_head_1024_16": m1024_16.d_model * m1024_16.head_dim,
        "wq_all_1024_16": m1024_16.qkv_proj.weight[: m1024_16.d_model].numel(),
        "wq_all_1024_32": m1024_32.qkv_proj.weight[: m1024_32.d_model].numel(),
        "params_1024_16": n_params(m1024_16),
        "params_1024_32": n_params(m1024_32),
        "mistral_heads": mistral.num_heads,
        "mistral_kv_heads": mistral.num_kv_heads,
        "mistral_n_rep": mistral.n_rep,
        "mistral_head_dim": mistral.head_dim,
    }
    text: dict[str, str] = {}

    # KV cache of one sequence, bf16: bytes per token per layer from lessons_src.kv_cache's formula.
    kv = cfgs[KV_MODEL]
    per_layer = kv_bytes_per_token(kv.num_kv_heads, kv.head_dim, torch.bfloat16)
    per_token = per_layer * kv.num_layers
    as_mha = kv_bytes_per_token(kv.num_heads, kv.head_dim, torch.bfloat16) * kv.num_layers
    values |= {
        "kv_layers": kv.num_layers, "kv_heads": kv.num_heads, "kv_kv_heads": kv.num_kv_heads,
        "kv_head_dim": kv.head_dim, "kv_context": KV_CONTEXT, "kv_bytes_token_layer": per_layer,
        "kv_bytes_token": per_token, "bf16_bytes": torch.empty((), dtype=torch.bfloat16).element_size(),
    }
    text |= {
        "kv_model": KV_MODEL,
        "kv_cache": format_bytes(per_token * KV_CONTEXT),
        "kv_cache_as_mha": format_bytes(as_mha * KV_CONTEXT),
        "kv_cache_keys_only": format_bytes(per_token * KV_CONTEXT / 2),
        "kv_cache_one_layer": format_bytes(per_layer * KV_CONTEXT),
        "kv_token": format_bytes(per_token),
    }

    # GQA: which KV head a query head reads, from repeat_kv's layout (head h -> KV head h // n_rep).
    g = cfgs[GQA_MODEL]
    kv_of_head = repeat_kv(torch.arange(g.num_kv_heads).view(1, -1, 1, 1), g.n_rep).flatten().tolist()
    values |= {
        "gqa_heads": g.num_heads, "gqa_kv_heads": g.num_kv_heads, "gqa_n_rep": g.n_rep,
        "gqa_head": GQA_QUERY_HEAD, "gqa_kv_of_head": kv_of_head[GQA_QUERY_HEAD],
        "gqa_wrong_modulo": GQA_QUERY_HEAD % g.num_kv_heads, "gqa_wrong_div": GQA_QUERY_HEAD // g.num_kv_heads,
    }
    text["gqa_model"] = GQA_MODEL

    # A causal mask with a cache: bottom-right (ours) against top-left (SDPA's is_causal for T != S).
    first = causal_mask(MASK_T, MASK_S)[0].nonzero().flatten().tolist()
    top_left = torch.ones(MASK_T, MASK_S, dtype=torch.bool).tril()[0].nonzero().flatten().tolist()
    values |= {
        "mask_T": MASK_T, "mask_S": MASK_S, "mask_cached": MASK_S - MASK_T,
        "mask_first_last": first[-1], "mask_topleft_last": top_left[-1], "mask_last_key": MASK_S - 1,
    }

    # MLA (DeepSeek-V2): per-token cache and the width absorbed attention works in.
    ds = cfgs[MLA_MODEL]
    assert ds.mla is not None
    C, R = ds.mla["kv_latent_dim"], ds.mla["rope_dim"]
    latent = latent_bytes_per_token(C, R, torch.bfloat16)
    mha_equiv = kv_bytes_per_token(ds.num_heads, ds.head_dim, torch.bfloat16, v_head_dim=ds.mla["v_head_dim"])
    values |= {
        "mla_heads": ds.num_heads, "mla_head_dim": ds.head_dim, "mla_C": C, "mla_R": R,
        "mla_absorbed_width": C + R, "mla_naive_key_width": ds.head_dim + R,
        "mla_bytes": latent, "mla_mha_bytes": mha_equiv,
    }
    text["mla_ratio"] = f"{mha_equiv / latent:.0f}"
    return {k: f"{v:,}" for k, v in values.items()} | text


def placeholders(text: str) -> set[str]:
    """The ``{name}`` placeholders in ``text``."""
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def fill(text: str) -> str:
    """Replace placeholders with computed values.

    Raises:
        ValueError: naming any placeholder that :func:`computed_values` does not know.
    """
    values = computed_values()
    unknown = placeholders(text) - set(values)
    if unknown:
        raise ValueError(f"unknown placeholders {sorted(unknown)} in {text!r}; known: {sorted(values)}")
    return text.format(**values)


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


def _require(cond: bool, message: str) -> None:
    if not cond:
        raise ValueError(message)


PARTS = {  # part key -> the heading the quiz and flashcard pages show; in the navigation's order
    "lessons": "The lessons: heads, shapes, costs, pitfalls",
    "inference": "Inference variants: KV cache, masks, GQA, MLA",
    "sdpa": "How SDPA runs: FlashAttention",
    "long": "Long contexts: sliding windows, attention sinks, paged caches, chosen keys",
    "today": "Today's models: NoPE, RoPE scaling, chunks, QK-norm, caps, sinks, gates, linear layers",
    "kernels": "Writing kernels: masks as functions",
    "devices": "Across devices: tensor parallelism, Ulysses, ring attention",
}
QUIZ_PARTS = PARTS


def load_flashcards(path: Path = DATA / "flashcards.json") -> list[dict[str, str]]:
    """Load and validate the flashcards (``id``, ``part``, ``front``, ``back``; unique ids; at least 12).

    ``part`` is a key of :data:`PARTS`: the page groups the cards by part, each group a collapsible.
    """
    cards = json.loads(path.read_text(encoding="utf-8"))["cards"]
    _require(isinstance(cards, list), f"{path}: 'cards' must be a list")
    _require(len(cards) >= MIN_FLASHCARDS, f"{path}: {len(cards)} cards; at least {MIN_FLASHCARDS} are needed")
    ids = [c.get("id") for c in cards]
    _require(len(set(ids)) == len(ids), f"{path}: duplicate card ids {sorted({i for i in ids if ids.count(i) > 1})}")
    for card in cards:
        keys = sorted(card)
        want = {"id", "part", "front", "back"}
        _require(set(card) == want, f"card {card.get('id')}: keys {keys}; want id, part, front, back")
        _require(card["part"] in PARTS, f"card {card['id']}: part {card['part']!r} is not one of {sorted(PARTS)}")
        for key in ("id", "front", "back"):
            _require(isinstance(card[key], str) and card[key].strip() != "", f"card {card['id']}: empty '{key}'")
        for s in _strings(card):
            fill(s)
    return [{k: fill(v) for k, v in card.items()} for card in cards]




def load_quiz(path: Path = DATA / "quiz.json") -> list[dict[str, Any]]:
    """Load and validate the quiz: 2+ options per question, exactly one correct, an explanation for each.

    Each question names the ``part`` of the course it tests (a key of :data:`QUIZ_PARTS`); the page
    groups the questions by part, each group a collapsible, so the page stays short as questions are added.
    """
    questions = json.loads(path.read_text(encoding="utf-8"))["questions"]
    _require(len(questions) >= MIN_QUIZ, f"{path}: {len(questions)} questions; at least {MIN_QUIZ} are needed")
    ids = [q.get("id") for q in questions]
    _require(len(set(ids)) == len(ids), f"{path}: duplicate question ids")
    for q in questions:
        qid = q.get("id")
        needed = {"id", "part", "prompt", "options"}
        _require(needed <= set(q), f"question {qid}: needs id, part, prompt, options; has {sorted(q)}")
        _require(q["part"] in QUIZ_PARTS, f"question {qid}: part {q['part']!r} is not one of {sorted(QUIZ_PARTS)}")
        opts = q["options"]
        _require(len(opts) >= 2, f"question {qid}: {len(opts)} options; at least 2 are needed")
        n_correct = sum(o.get("correct") is True for o in opts)
        _require(n_correct == 1, f"question {qid}: {n_correct} correct options; exactly 1 is needed")
        for i, o in enumerate(opts):
            _require(set(o) == {"text", "correct", "explanation"}, f"question {qid} option {i}: keys {sorted(o)}")
            _require(isinstance(o["correct"], bool), f"question {qid} option {i}: 'correct' must be true or false")
            _require(o["text"].strip() != "", f"question {qid} option {i}: empty text")
            _require(len(o["explanation"].strip()) >= 15, f"question {qid} option {i}: explanation too short")
        texts = [fill(o["text"]) for o in opts]
        _require(len(set(texts)) == len(texts), f"question {qid}: two options read the same: {texts}")
        for s in _strings(q):
            fill(s)
    return [
        {
            "id": q["id"],
            "part": q["part"],
            "prompt": fill(q["prompt"]),
            "options": [{**o, "text": fill(o["text"]), "explanation": fill(o["explanation"])} for o in q["options"]],
        }
        for q in questions
    ]


def render_flashcards(cards: list[dict[str, str]]) -> str:
    """HTML for the flashcard deck: ``[data-flashcards]`` holding one ``li.flashcard-item`` per card.

    The cards are grouped by part (``details.flashcard-part``, each with its ``ol.flashcard-list``, in
    :data:`PARTS` order, the first open) and numbered through the deck.

    Each item has the card (``button.flashcard``: the question, and the answer in space reserved from the
    start, so flipping never moves the page) and two mark buttons (``[data-mark=known|again]``). The
    toolbar's buttons shuffle, show every answer, switch to the cards marked again, reset the marks, print.
    """
    e = html.escape
    n = len(cards)
    ordered = [c for part in PARTS for c in cards if c.get("part", "lessons") == part]
    groups: dict[str, list[str]] = {part: [] for part in PARTS}
    for i, c in enumerate(ordered, 1):
        cid = e(c["id"])
        groups[c.get("part", "lessons")].append(
            f'<li class="flashcard-item" data-card-id="{cid}">'
            f'<button type="button" class="flashcard" id="card-{cid}" aria-pressed="false">'
            f'<span class="flashcard-face flashcard-front"><span class="flashcard-label">'
            f'<span class="flashcard-number">Card {i} of {n}</span> · question</span>'
            f'<span class="flashcard-text">{e(c["front"])}</span></span>'
            f'<span class="flashcard-face flashcard-back"><span class="flashcard-label">answer</span>'
            f'<span class="flashcard-text">{e(c["back"])}</span></span>'
            f'<span class="flashcard-hint" aria-hidden="true">Show the answer</span>'
            f"</button>"
            f'<span class="flashcard-marks" role="group" aria-label="Card {i}: did you know it?">'
            f'<button type="button" class="flashcard-mark" data-mark="known" aria-pressed="false">Knew it</button>'
            f'<button type="button" class="flashcard-mark" data-mark="again" aria-pressed="false">Again</button>'
            f"</span></li>"
        )
    sections = [
        f'<details class="flashcard-part" data-flashcard-part="{part}"{" open" if k == 0 else ""}>'
        f"<summary>{e(PARTS[part])} ({len(items)} cards)</summary>\n"  # a space: indexed apart (issue 77)
        f'<ol class="flashcard-list">{"".join(items)}</ol></details>'
        for k, (part, items) in enumerate((p, g) for p, g in groups.items() if g)
    ]
    return (
        '<div class="flashcards" data-flashcards>'
        '<p class="flashcards-toolbar">'
        '<button type="button" class="md-button" data-shuffle-flashcards>Shuffle</button> '
        '<button type="button" class="md-button" data-flip-all>Show all answers</button> '
        '<button type="button" class="md-button" data-study-again aria-pressed="false">'
        "Study the ones marked again</button> "
        '<button type="button" class="md-button" data-reset-marks>Reset marks</button> '
        '<button type="button" class="md-button" data-print-flashcards>Print flashcards</button></p>'
        f'<p class="flashcards-status" data-flashcards-status aria-live="polite">{n} cards.</p>'
        + "\n".join(sections) + "</div>"
    )


def score_text(answered: int, total: int, correct: int) -> str:
    """The quiz's score line; ``practice.js`` writes the same words as the reader answers."""
    return f"{answered} of {total} answered, {correct} correct"


def render_quiz(questions: list[dict[str, Any]]) -> str:
    """HTML for the quiz: ``[data-quiz]``; one ``fieldset.quiz-question`` with radio inputs per question.

    The questions are grouped by part (``details.quiz-part``, in :data:`QUIZ_PARTS` order, the first one
    open) and numbered through the whole quiz; the score line counts every question.
    """
    e = html.escape
    groups: dict[str, list[str]] = {part: [] for part in QUIZ_PARTS}
    n = 0
    for part in QUIZ_PARTS:
        for q in (q for q in questions if q["part"] == part):
            n += 1
            qid = e(q["id"])
            opts = []
            for i, o in enumerate(q["options"]):
                opts.append(
                    f'<li><label class="quiz-option"><input type="radio" name="quiz-{qid}" value="{i}" '
                    f'data-correct="{str(o["correct"]).lower()}" data-explanation="{e(o["explanation"])}"> '
                    f"<span>{e(o['text'])}</span></label></li>"
                )
            groups[part].append(
                f'<fieldset class="quiz-question" id="quiz-{qid}" data-question-id="{qid}">'
                f'<legend><span class="quiz-number">Question {n}.</span> {e(q["prompt"])}</legend>'
                f'<ol class="quiz-options" type="A">{"".join(opts)}</ol>'
                f'<p class="quiz-feedback" aria-live="polite"></p></fieldset>'
            )
    sections = []
    for i, (part, items) in enumerate((p, g) for p, g in groups.items() if g):
        sections.append(
            f'<details class="quiz-part" data-quiz-part="{part}"{" open" if i == 0 else ""}>'
            f"<summary>{e(QUIZ_PARTS[part])} ({len(items)} questions)</summary>\n{''.join(items)}</details>\n"
        )
    return (
        f'<form class="quiz" data-quiz data-total="{len(questions)}" onsubmit="return false">'
        f'<p class="quiz-score-line">Score: <output data-quiz-score aria-live="polite">'
        f"{score_text(0, len(questions), 0)}</output></p>{''.join(sections)}"
        '<p><button type="reset" class="md-button" data-quiz-reset>Start again</button></p></form>'
    )


def pack_attention(weights: Any, tokens: list[str], decimals: int = 2) -> dict[str, Any]:
    """One sentence's attention for the head explorer: weights as integers in units of ``10**-decimals``.

    Args:
        weights: attention probabilities, rows summing to 1.
        tokens: the token strings, one per position.
        decimals: precision kept (2 means hundredths).

    Shapes:
        weights: ``(L, H, T, T)`` (layers, heads, query, key).

    Raises:
        ValueError: if the shape does not match ``tokens`` or rows do not sum to 1.
    """
    import torch

    w = torch.as_tensor(weights, dtype=torch.float64)
    if w.ndim != 4 or w.shape[-1] != w.shape[-2] or w.shape[-1] != len(tokens):
        raise ValueError(f"weights must be (L, H, T, T) with T={len(tokens)} tokens; got {tuple(w.shape)}")
    sums = w.sum(-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-3):
        raise ValueError(f"attention rows must sum to 1; found sums from {sums.min():.4f} to {sums.max():.4f}")
    scale = 10**decimals
    return {
        "tokens": list(tokens),
        "scale": scale,
        "weights": (w * scale).round().to(torch.int64).tolist(),  # [L][H][T][T]
    }


# The sentences the head explorer shows (few and short, to keep the embedded data small): first the
# lessons' running sentence (lessons_src.lab.minilm.EXAMPLE_SENTENCES[0]), then two more.
EXPLORER_EXTRA_SENTENCES = [
    "The keys to the old cabinet are on the table.",
    "She read the letter that her brother had written.",
]


def explorer_sentences() -> list[str]:
    """The pretrained model's inputs in the head explorer: the lessons' running sentence, then two more."""
    from lessons_src.lab.minilm import EXAMPLE_SENTENCES

    return [EXAMPLE_SENTENCES[0], *EXPLORER_EXTRA_SENTENCES]


def explorer_source(source_id: str, label: str, note: str, items: list[tuple[str, list[str], Any]]) -> dict[str, Any]:
    """One model's entry in the explorer data.

    Args:
        source_id: short id (``"minilm"``).
        label: what the model menu shows.
        note: one sentence on where the weights come from.
        items: ``(menu text, tokens, weights)`` per input, weights ``(L, H, T, T)``.

    Raises:
        ValueError: if ``items`` is empty or the inputs disagree on the number of layers and heads.
    """
    packed = []
    shape: tuple[int, int] | None = None
    for text, tokens, weights in items:
        packed.append({"text": text, **pack_attention(weights, list(tokens))})
        L, H = int(weights.shape[0]), int(weights.shape[1])
        if shape not in (None, (L, H)):
            raise ValueError(f"{source_id}: inputs disagree on (layers, heads): {shape} and {(L, H)}")
        shape = (L, H)
    if shape is None:
        raise ValueError(f"{source_id}: no inputs given; pass at least one")
    return {"id": source_id, "label": label, "note": note, "num_layers": shape[0], "num_heads": shape[1],
            "sentences": packed}


def render_head_explorer(sources: list[dict[str, Any]]) -> str:
    """HTML for the head explorer: controls, an empty stage the JavaScript fills, and the data as JSON."""
    e = html.escape
    first = sources[0]
    # Embedded as the text of a hidden <div>, not a <script type="application/json">: Material's instant
    # navigation re-creates every <script> of a new page without its attributes, which ran the JSON as
    # JavaScript (a SyntaxError) and dropped the class the widget looks for. data-search-exclude keeps it out of
    # the search index, which every page loads (it was 150 KB of the index's 1.07 MB: numbers no one searches).
    payload = html.escape(json.dumps({"sources": sources}, separators=(",", ":")), quote=False)

    def options(items: list[tuple[str, str]], selected: str) -> str:
        return "".join(
            f'<option value="{e(v)}"{" selected" if v == selected else ""}>{e(t)}</option>' for v, t in items
        )

    models = options([(str(i), s["label"]) for i, s in enumerate(sources)], "0")
    sents = options([(str(i), s["text"]) for i, s in enumerate(first["sentences"])], "0")
    layers = options([(str(i), f"layer {i}") for i in range(first["num_layers"])], "0")
    heads = options([("all", "all heads")] + [(str(i), f"head {i}") for i in range(first["num_heads"])], "0")
    return (
        '<div class="head-explorer" data-head-explorer>'
        '<div class="hx-controls">'
        f'<label>Model <select name="model">{models}</select></label>'
        f'<label class="hx-sentence">Sentence <select name="sentence">{sents}</select></label>'
        f'<label>Layer <select name="layer">{layers}</select></label>'
        f'<label>Head <select name="head">{heads}</select></label>'
        "</div>"
        '<div class="hx-legend" aria-hidden="true"></div>'
        # its rows (the first sentence's tokens, as practice.js sets them): practice.css makes it that tall before the
        # script draws them, so nothing under it moves then
        f'<div class="hx-stage" style="--hx-rows: {len(first["sentences"][0]["tokens"])}"></div>'
        '<p class="hx-readout" aria-live="polite">The explorer needs JavaScript; the data is embedded in this page.</p>'
        f'<div class="hx-data" hidden data-search-exclude>{payload}</div>'
        "</div>"
    )


TOY_SEEDS = (0, 1)  # the random sequences shown for the trained toy model


def toy_segment_lengths() -> tuple[int, ...]:
    """Lengths of the toy inputs' repeated segment: the shortest the model was trained on, and the middle one.

    Read from the committed training log, so the inputs stay within what the model learned (a shorter
    repeat than it ever saw shows little induction), and no longer than needed: the page embeds every
    weight of every input.
    """
    from lessons_src.lab import read_artifact_json

    log = read_artifact_json("induction_training.json")
    low, high = int(log["min_seg"]), int(log["max_seg"])
    return (low, (low + high) // 2)


def toy_inputs(vocab_size: int) -> list[tuple[str, list[int]]]:
    """The toy model's inputs: ``n`` random tokens, then the same ``n`` again, for each trained length ``n``."""
    from lessons_src.lab.toy_models import repeated_random_tokens

    out = []
    for seed, n in zip(TOY_SEEDS, toy_segment_lengths(), strict=True):
        ids = repeated_random_tokens(n, vocab_size, seed=seed)[0].tolist()
        out.append((f"{n} random tokens, then the same {n} again (seed {seed})", ids))
    return out


def explorer_data() -> list[dict[str, Any]]:
    """The head explorer's data, computed by ``lessons_src`` when the site is built.

    * the pretrained all-MiniLM-L6-v2, through ``lessons_src.lab.minilm.attention_maps``;
    * the project's 2-layer attention-only model trained on repeated random tokens, from its committed
      checkpoint, through ``lessons_src.lab.toy_models.attention_maps``.
    """
    from lessons_src.lab import minilm, toy_models

    real = [(text, *minilm.attention_maps(text)) for text in explorer_sentences()]
    toy = toy_models.load_induction_model()
    toy_items = [
        (text, [str(i) for i in ids], toy_models.attention_maps(ids, toy))
        for text, ids in toy_inputs(toy.cfg.vocab_size)
    ]
    return [
        explorer_source(
            "minilm",
            "all-MiniLM-L6-v2 (pretrained)",
            "sentence-transformers/all-MiniLM-L6-v2: 6 layers x 12 heads, run with lessons_src.lab.minilm",
            real,
        ),
        explorer_source(
            "induction",
            "the project's toy model (trained here)",
            "2-layer attention-only transformer trained on repeated random tokens (lessons_src.lab.toy_models)",
            toy_items,
        ),
    ]
