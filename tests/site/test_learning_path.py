"""The reading order: terms introduced before use, every page linked from home, reading time, clean nav text.

Each lesson's front matter lists the terms it `introduces` and the terms it `uses`; `previews` names terms a
page mentions ahead of their lesson, with a link to it. Checked here, in the navigation's order:

* every term a page uses is introduced by that page or an earlier one;
* no page's prose names a term introduced later unless it previews it, and a preview links to the page
  that introduces the term;
* the home page maps every section of the navigation (links its first page);
* the navigation and table-of-contents text shows no raw LaTeX, and no page shows backslash-quotes;
* every lesson shows a reading time that agrees with its own word count.
"""

from __future__ import annotations

import html
import math
import re
from pathlib import Path

import pytest
import reading_time
import yaml
from reading_order import DOCS, EXEMPT, LESSONS, ROOT, SITE, built, front_matter

if not (SITE / "index.html").exists():
    pytest.fail("site/ is not built: run `make build` first (make test does)", pytrace=False)


def prose(src: str) -> str:
    """The article's prose: code, figures, math, tables of numbers and the front matter left out."""
    raw = built(src).read_text(encoding="utf-8")
    raw = raw[raw.index("<article") : raw.index("</article>")]
    raw = re.sub(r"<(pre|svg|script|style|code)\b.*?</\1>", " ", raw, flags=re.S)
    raw = re.sub(r'<span class="katex">.*?</span></span></span>', " ", raw, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", raw))


def test_every_lesson_declares_its_terms() -> None:
    lesson_files = sorted(str(p.relative_to(DOCS)) for p in (DOCS / "lessons").glob("*.md"))
    assert sorted(LESSONS) == lesson_files, "each lesson needs `introduces` and `uses` in its front matter"
    for src in LESSONS:
        meta = front_matter(src)
        assert isinstance(meta["introduces"], list) and isinstance(meta.get("uses"), list), src


def introduced_by() -> dict[str, str]:
    owner: dict[str, str] = {}
    for src in LESSONS:
        for term in front_matter(src)["introduces"]:
            assert term not in owner, f"{term!r} is introduced twice: {owner.get(term)} and {src}"
            owner[term] = src
    return owner


def test_terms_are_introduced_before_they_are_used() -> None:
    owner, order = introduced_by(), {src: i for i, src in enumerate(LESSONS)}
    problems = []
    for src in LESSONS:
        for term in front_matter(src)["uses"]:
            if term not in owner:
                problems.append(f"{src} uses {term!r}, which no lesson introduces")
            elif order[owner[term]] > order[src]:
                problems.append(f"{src} uses {term!r} before {owner[term]} introduces it")
    assert problems == []


def mentions(text: str, term: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(term)}(?![\w-])", text, flags=re.I) is not None


def test_no_lesson_names_a_later_term_without_a_preview_link() -> None:
    owner, order = introduced_by(), {src: i for i, src in enumerate(LESSONS)}
    problems = []
    for src in LESSONS:
        text, raw = prose(src), built(src).read_text(encoding="utf-8")
        previews = front_matter(src).get("previews", [])
        for term, intro in owner.items():
            if order[intro] <= order[src] or term in EXEMPT:
                continue
            target = Path(intro).stem
            if term in previews:
                if f'href="../{target}/' not in raw:
                    problems.append(f"{src} previews {term!r} without linking to {intro}")
            elif mentions(text, term):
                problems.append(f"{src} names {term!r}, introduced later by {intro}")
    assert problems == []


def test_the_checks_catch_a_term_used_too_early() -> None:
    owner = introduced_by()
    assert owner["KV cache"] == "lessons/inference-variants.md"
    assert mentions(prose("lessons/inference-compared.md"), "sliding window")
    assert not mentions("a sliding-windowed view", "sliding window")


def nav_sections() -> dict[str, str]:
    """Each top-level entry of the navigation (a page, or a section) and the first page a reader opens in it."""
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    first: dict[str, str] = {}
    for item in config["nav"]:
        name, value = next(iter(item.items()))
        while isinstance(value, list):
            value = next(iter(value[0].values())) if isinstance(value[0], dict) else value[0]
        first[name] = value
    return first


def test_home_maps_every_section_of_the_navigation() -> None:
    """The home page's map links each top-level page and the first page of each section (the sidebar lists the
    rest): a section added to the navigation must be added to the map."""
    home = (SITE / "index.html").read_text(encoding="utf-8")
    article = home[home.index("<article") : home.index("</article>")]
    missing = []
    for name, src in nav_sections().items():
        if src == "index.md":
            continue
        href = src.removesuffix(".md").removesuffix(".ipynb").removesuffix("/index") + "/"
        if f'href="{href}"' not in article:
            missing.append(f"{name} ({src})")
    assert missing == []
    assert nav_sections()["Inference variants"] == "lessons/inference-variants.md"


def all_pages() -> list[Path]:
    return sorted(SITE.rglob("index.html"))


def test_navigation_and_toc_show_no_raw_latex() -> None:
    problems = []
    for page in all_pages():
        raw = page.read_text(encoding="utf-8")
        for m in re.finditer(r'<a[^>]*class="md-nav__link[^"]*"[^>]*>(.*?)</a>', raw, re.S):
            label = html.unescape(re.sub(r"<[^>]+>", "", m.group(1))).strip()
            if re.search(r"\\\(|\\text|\\sqrt|\$", label):
                problems.append(f"{page.relative_to(SITE)}: {label!r}")
    assert sorted(set(problems)) == []


@pytest.mark.parametrize("page", all_pages(), ids=lambda p: str(p.relative_to(SITE)))
def test_no_backslash_quotes_in_visible_text(page: Path) -> None:
    raw = page.read_text(encoding="utf-8")
    raw = re.sub(r"<(pre|script|style|code|svg)\b.*?</\1>", " ", raw, flags=re.S)
    text = html.unescape(re.sub(r"<[^>]+>", " ", raw))
    found = re.findall(r".{0,30}\\[\"'].{0,30}", text)
    assert found == []


@pytest.mark.parametrize("src", LESSONS)
def test_lesson_shows_its_reading_time(src: str) -> None:
    raw = built(src).read_text(encoding="utf-8")
    m = re.search(r'<p class="reading-time">About (\d+) min read \(([\d,]+) words of prose at (\d+) a minute', raw)
    assert m is not None, f"{src} shows no reading time"
    minutes, words, wpm = int(m.group(1)), int(m.group(2).replace(",", "")), int(m.group(3))
    assert wpm == reading_time.READING_WPM and minutes == max(1, math.ceil(words / wpm))
    article = raw[raw.index("<article") : raw.index("</article>")].replace(m.group(0), "")
    # the count is of this page's prose: recount the built article (the hook ran before other hooks added markup)
    assert abs(reading_time.count_words(article) - words) <= max(20, words // 20)


def test_reading_time_counts_prose_only() -> None:
    page = "<h1>T</h1><p>one two three</p><pre><code>x = 1 + 2</code></pre><svg><text>a b</text></svg>"
    assert reading_time.count_words(page) == 4
    # typeset math is left out whole: KaTeX nests spans deeper than any fixed closing sequence (a formula with an
    # operator draws one "base" span per side), and the old pattern let the second side's letters count as words
    formula = ('<span class="katex"><span class="katex-html"><span class="base"><span class="mord">a</span></span>'
               '</span><span class="base"><span class="mord">b</span></span></span></span>')
    assert reading_time.count_words(f"<p>one {formula} two</p>") == 2
    assert reading_time.count_words('<p>one <span class="arithmatex">\\(a + b\\)</span> two</p>') == 2
    assert reading_time.reading_minutes(0) == 1 and reading_time.reading_minutes(201) == 2
    with pytest.raises(ValueError, match="words must be >= 0"):
        reading_time.reading_minutes(-1)


def test_induction_page_probes_at_a_trained_length_and_its_claim_holds() -> None:
    """The text says most second-copy queries look n - 1 back: the printed numbers must say so too."""
    import torch

    from lessons_src.lab import read_artifact_json, toy_models

    raw = built("lessons/induction-heads.md").read_text(encoding="utf-8")
    text = html.unescape(re.sub(r"<[^>]+>", "", re.sub(r"<svg.*?</svg>", " ", raw, flags=re.S)))
    log = read_artifact_json("induction_training.json")
    n = (log["min_seg"] + log["max_seg"]) // 2
    assert log["min_seg"] <= n <= log["max_seg"]
    model = toy_models.load_induction_model()
    scores = toy_models.induction_scores(model)
    head = int(scores["prefix matching"][1].argmax())
    tokens = toy_models.repeated_random_tokens(n, model.cfg.vocab_size, seed=1)[0]
    rows = toy_models.attention_maps(tokens, model)[1, head, n:]  # (n, 2n): the repeated half
    expected = torch.arange(n, 2 * n) - (n - 1)
    on_key = rows[torch.arange(n), expected]
    share = (rows.argmax(-1) == expected).float().mean()
    m = re.search(rf"induction +head \(layer 1 head {head}\): n = {n}, mean weight on the key {n - 1} back "
                  r"([0-9.]+) \(lowest [0-9.]+\); it is the largest weight for (\d+)% of the queries", text)
    assert m is not None
    assert float(m.group(1)) == round(float(on_key.mean()), 2) and int(m.group(2)) == round(float(share) * 100)
    assert "most tokens of the" in prose("lessons/induction-heads.md")
    assert float(share) > 0.5 and float(on_key.mean()) > 0.5


def test_footer_links_name_the_section_of_a_numbered_part() -> None:
    """"Next: 3. Paged KV caches" says nothing of which series: the footer must name the section."""
    problems = []
    for page in all_pages():
        raw = page.read_text(encoding="utf-8")
        link = r'class="md-footer__link[^"]*" aria-label="([^"]*)".*?<div class="md-ellipsis">\s*(.*?)\s*</div>'
        for m in re.finditer(link, raw, re.S):
            label, text = html.unescape(m.group(1)), html.unescape(m.group(2))
            if re.match(r"(Next|Previous): \d+\.", label) or re.match(r"\d+\.", text):
                problems.append(f"{page.relative_to(SITE)}: {label!r} / {text!r}")
    assert problems == [], "\n".join(problems)
