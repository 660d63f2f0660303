"""The live model page (docs/practice/live-model.md): the trained induction model running in the browser.

* Exactness: on fixed inputs, with and without switched-off heads, the browser's logits and attention weights
  equal PyTorch's through ``lessons_src`` (``TinyTransformer`` + ``ablate_heads``) within
  ``BROWSER_ATOL`` (the tolerance the page prints). The reference is computed here, at test time;
  the site ships no reference numbers.
* The widget as a reader drives it: reached from the menu (instant navigation) and from a shared URL; presets
  reproduce the lessons' findings (the numbers the page printed at build, recomputed here with torch);
  switching heads off and on updates at once; pointer and keyboard move the query position; bad input gets
  an inline message and no console error; 375 px, dark mode, axe-core.
"""

from __future__ import annotations

import json
import re
from typing import Any

import live_model
import pytest
import torch
from browser_support import Watch, goto, open_by_navigation, open_context, page_file, site_pages
from playwright.sync_api import expect
from views import run_axe

from lessons_src.lab.heads import ablate_heads
from lessons_src.lab.toy_models import BROWSER_ATOL, load_induction_model

PATH = "practice/live-model/"


@pytest.fixture(scope="module")
def model() -> Any:
    return load_induction_model()


def assert_clean(watch: Watch) -> None:
    assert watch.problems() == {}, f"the browser reported problems: {watch.problems()}"


def open_page(page: Any, url: str) -> None:
    goto(page, url)
    page.wait_for_function("() => window.liveModel && document.querySelector('.lm-summary').textContent !== ''")
    page.evaluate("() => window.liveModel.ready")


def reference(model: Any, tokens: list[int], off: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    keep = torch.ones(model.cfg.num_layers, model.cfg.num_heads)
    for layer, head in off:
        keep[layer, head] = 0.0
    with torch.no_grad(), ablate_heads(model.attentions, keep):
        logits, weights = model(torch.tensor([tokens]), need_weights=True)
    assert weights is not None
    return logits[0], weights[:, 0]  # (T, V), (L, H, T, T)


def summary_numbers(page: Any) -> tuple[int, float, int]:
    """(positions in the repeated part, loss there, how many of them the top guess got right)."""
    text = page.locator(".lm-summary").inner_text()
    m = re.search(r"Repeated part \((\d+) positions.*?loss ([\d.]+) nats, accuracy \d+% \((\d+) of \1\)", text)
    assert m, f"no repeated-part numbers in the summary: {text!r}"
    return int(m.group(1)), float(m.group(2)), int(m.group(3))


def test_the_page_is_in_the_site() -> None:
    assert PATH in site_pages()
    html = page_file(PATH).read_text(encoding="utf-8")
    assert "data-live-model" in html


def test_browser_equals_pytorch(page: Any, context: tuple[Any, Watch], server: str, model: Any) -> None:
    open_page(page, server + PATH)
    cfg = model.cfg
    g = torch.Generator().manual_seed(0)
    segment = torch.randint(0, cfg.vocab_size, (20,), generator=g).tolist()
    cases: list[tuple[list[int], list[tuple[int, int]]]] = [
        (torch.randint(0, cfg.vocab_size, (cfg.max_len,), generator=g).tolist(), []),
        (segment + segment, []),
        (segment + segment, [(0, 0)]),
        (segment + segment, [(1, h) for h in range(cfg.num_heads)]),
        (segment + segment, [(0, 1), (0, 3), (1, 2)]),
        ([5], [(0, 0), (1, 1)]),
        ([cfg.vocab_size - 1, 0, cfg.vocab_size - 1], [(i, h) for i in range(cfg.num_layers) for h in range(4)]),
    ]
    for tokens, off in cases:
        got = page.evaluate("([t, off]) => window.liveModel.run(t, off)", [tokens, [list(o) for o in off]])
        logits, weights = reference(model, tokens, off)
        got_logits = torch.tensor(got["logits"], dtype=torch.float64)
        got_weights = torch.tensor(got["attention"], dtype=torch.float64)
        torch.testing.assert_close(got_logits, logits.double(), atol=BROWSER_ATOL, rtol=0)
        torch.testing.assert_close(got_weights, weights.double(), atol=BROWSER_ATOL, rtol=0)
    # The names the page uses ("L0H1") mean the same heads as [layer, head] pairs.
    by_name = page.evaluate("t => window.liveModel.run(t, ['L0H1', 'L1H3'])", segment)
    by_pair = page.evaluate("t => window.liveModel.run(t, [[0, 1], [1, 3]])", segment)
    assert by_name == by_pair
    # And ablation does change the output (the comparison above is not vacuous).
    plain = page.evaluate("t => window.liveModel.run(t, [])", segment)
    assert plain["logits"] != by_name["logits"]
    assert_clean(context[1])


def test_exported_weights_are_the_checkpoint(page: Any, context: tuple[Any, Watch], server: str, model: Any) -> None:
    """The file the page loads holds the checkpoint's float32 values exactly."""
    open_page(page, server + PATH)
    src = page.locator("[data-live-model]").get_attribute("data-model-src")
    meta = page.evaluate("u => fetch(u).then(r => r.json())", src)
    raw = page.evaluate(
        "([u, w]) => fetch(new URL(w, new URL(u, document.baseURI)).href).then(r => r.arrayBuffer())"
        ".then(b => Array.from(new Float32Array(b)))",
        [src, meta["weights"]],
    )
    flat = torch.cat([t.flatten() for t in model.state_dict().values()])
    assert torch.equal(torch.tensor(raw, dtype=torch.float32), flat)
    assert_clean(context[1])


def test_presets_reproduce_the_lessons_findings(page: Any, context: tuple[Any, Watch], server: str) -> None:
    open_by_navigation(page, server, PATH)  # from the menu: Material's instant navigation swaps the page in
    page.wait_for_function("() => document.querySelector('.lm-summary').textContent !== ''")
    for preset in live_model.presets()[:4]:
        page.locator(f".lm-preset[data-preset='{preset['id']}']").click()
        expected = live_model.outcome(preset["id"])  # PyTorch through lessons_src
        n, loss, hits = summary_numbers(page)
        assert n == expected["n"]
        assert loss == pytest.approx(expected["loss"], abs=0.006), preset["id"]
        assert hits == expected["hits"], preset["id"]
        off = page.locator(".lm-heads input:not(:checked)").evaluate_all("els => els.map(e => e.dataset.head)")
        assert sorted(off) == sorted(preset["off"])
        page.wait_for_function(
            "off => (new URLSearchParams(location.search).get('off') || '') === off", arg=",".join(sorted(off))
        )
    # The previous-token head matters: switching it off raises the loss on the repeated part.
    f = live_model.findings()
    assert live_model.outcome("no-previous-token-head")["loss"] > live_model.outcome("induction")["loss"]
    assert f["previous"] and f["induction"]
    assert_clean(context[1])


def test_toggling_heads_updates_at_once_and_restores(page: Any, context: tuple[Any, Watch], server: str) -> None:
    open_page(page, server + PATH + "?preset=induction")
    before = summary_numbers(page)
    prev = live_model.findings()["previous"][0]
    box = page.locator(f".lm-heads input[data-head='L0H{prev}']")
    box.focus()
    page.keyboard.press("Space")  # keyboard toggles it
    assert not box.is_checked()
    after = summary_numbers(page)
    assert after[1] > before[1], (before, after)
    page.wait_for_function("h => location.search.includes(h)", arg=f"L0H{prev}")  # the URL follows
    assert page.locator(f".lm-map:has(canvas[data-head='L0H{prev}'])").get_attribute("class").count("is-off") == 1
    page.locator(".lm-restore").click()
    assert page.locator(".lm-heads input:not(:checked)").count() == 0
    assert summary_numbers(page) == before
    page.wait_for_function("() => !location.search.includes('off=')")
    assert_clean(context[1])


def test_a_shared_url_restores_the_view(browser: Any, server: str, model: Any) -> None:
    tokens = [3, 14, 15, 9, 26, 5, 3, 14, 15, 9, 26, 5]
    context, watch = open_context(
        browser, server, viewport={"width": 375, "height": 667}, is_mobile=True, has_touch=True
    )
    try:
        page = context.new_page()
        open_page(page, server + PATH + "?tokens=" + ",".join(map(str, tokens)) + "&off=L1H0,L1H2")
        assert page.locator(".lm-token").evaluate_all("els => els.map(e => Number(e.textContent))") == tokens
        off = page.locator(".lm-heads input:not(:checked)").evaluate_all("els => els.map(e => e.dataset.head)")
        assert sorted(off) == ["L1H0", "L1H2"]
        # The summary on the page agrees with PyTorch for that sequence and those heads.
        logits, _ = reference(model, tokens, [(1, 0), (1, 2)])
        copy = torch.tensor(live_model.copyable_positions(tokens))
        loss = torch.nn.functional.cross_entropy(logits[:-1], torch.tensor(tokens[1:]), reduction="none")
        n, shown, _ = summary_numbers(page)
        assert n == int(copy.sum()) and shown == pytest.approx(float(loss[copy].mean()), abs=0.006)
        # Tapping a position on a phone moves the query there.
        page.locator(".lm-token").nth(4).tap()
        assert page.locator(".lm-token.is-active").get_attribute("data-index") == "4"
        assert "Position 4" in page.locator(".lm-readout").inner_text()
        widths = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
        assert widths[0] <= widths[1], f"the page scrolls sideways at 375 px: {widths}"
        # The weights table, drawn by the script when its collapsible opens (after the per-page checks measure
        # the page: they missed it scrolling sideways), fits the phone's column too.
        page.locator(".lm-table-box summary").click()
        expect(page.locator(".lm-table tbody td")).to_have_count(5)  # query 4 sees keys 0-4
        table = page.evaluate("(t => [t.parentElement.clientWidth, t.getBoundingClientRect().width])"
                              "(document.querySelector('.lm-table table'))")
        assert table[1] <= table[0], f"the weights table is {table[1]} px wide in a {table[0]}-px box at 375"
        assert_clean(watch)
    finally:
        context.close()


def test_a_lesson_links_to_a_matching_preset(page: Any, context: tuple[Any, Watch], server: str) -> None:
    """The ablation lesson's link arrives (by instant navigation) with its preset applied."""
    goto(page, server + "lessons/ablation/")
    page.evaluate("window.__not_reloaded = true")
    link = page.locator("article a[href*='live-model/?preset=']").first
    preset = re.search(r"preset=([\w-]+)", link.get_attribute("href") or "")
    assert preset
    link.scroll_into_view_if_needed()
    link.click()
    page.wait_for_function("() => (document.querySelector('.lm-summary') || {}).textContent")
    assert page.evaluate("window.__not_reloaded === true")
    expected = next(p for p in live_model.presets() if p["id"] == preset.group(1))
    off = page.locator(".lm-heads input:not(:checked)").evaluate_all("els => els.map(e => e.dataset.head)")
    assert sorted(off) == sorted(expected["off"])
    assert page.locator(".lm-token").count() == len(expected["tokens"])
    assert_clean(context[1])


def test_hover_and_keyboard_move_the_query(page: Any, context: tuple[Any, Watch], server: str) -> None:
    open_page(page, server + PATH + "?preset=induction")
    tokens = page.locator(".lm-token")
    tokens.nth(30).hover()
    assert page.locator(".lm-token.is-active").get_attribute("data-index") == "30"
    readout = page.locator(".lm-readout").inner_text()
    assert "Position 30" in readout and "L1H0 →" in readout
    tokens.nth(30).focus()
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.dataset.index") == "31"
    page.keyboard.press("Home")
    assert page.evaluate("document.activeElement.dataset.index") == "0"
    # Exactly one token is in the tab order (roving tabindex), and it has a visible focus outline.
    assert page.locator(".lm-token[tabindex='0']").count() == 1
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none"
    # Pointing at a heatmap row selects that query position.
    canvas = page.locator(".lm-maps canvas").first
    canvas.scroll_into_view_if_needed()
    box = canvas.bounding_box()
    canvas.hover(position={"x": box["width"] / 2, "y": box["height"] * (10.5 / 48)})
    assert page.locator(".lm-token.is-active").get_attribute("data-index") == "10"
    # The table in the collapsible shows the selected query's weights, one row per key it sees (they sum to 1).
    page.locator(".lm-table-box summary").click()
    cells = page.locator(".lm-table tbody td")
    expect(cells).to_have_count(11)  # the table is drawn when the collapsible opens: wait for it, not a fixed time
    row = cells.evaluate_all("els => els.map(e => Number(e.textContent))")
    assert len(row) == 11 and abs(sum(row) - 1) < 0.06
    canvas.hover(position={"x": box["width"] / 2, "y": box["height"] * (20.5 / 48)})  # another query: redrawn
    expect(cells).to_have_count(21)
    assert_clean(context[1])


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "empty"),
        ("1 2 99", "outside the vocabulary"),
        ("1 2 x", "not a token id"),
        (" ".join(["1"] * 65), "too long"),
    ],
)
def test_bad_input_gets_an_inline_message(
    page: Any, context: tuple[Any, Watch], server: str, text: str, words: str
) -> None:
    open_page(page, server + PATH + "?preset=induction")
    before = page.locator(".lm-summary").inner_text()
    page.locator(".lm-tokens-input").fill(text)
    message = page.locator(".lm-message")
    assert message.get_attribute("aria-live") == "polite"
    assert words in message.inner_text()
    assert page.locator(".lm-summary").inner_text() == before  # the last valid result stays
    page.locator(".lm-tokens-input").fill("1 2 3 1 2")
    assert "valid" in message.inner_text()
    assert page.locator(".lm-token").count() == 5
    assert_clean(context[1])


def test_a_bad_shared_url_gets_a_message(page: Any, context: tuple[Any, Watch], server: str) -> None:
    open_page_url = server + PATH + "?tokens=1,2,480&off=L9H9"
    goto(page, open_page_url)
    page.wait_for_function("() => document.querySelector('.lm-message').textContent.includes('cannot run')")
    assert "outside the vocabulary" in page.locator(".lm-message").inner_text()
    assert_clean(context[1])


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_with_the_widget_in_use(browser: Any, server: str, scheme: str) -> None:
    """axe-core on the page after the widget has drawn, with a head off and the table open."""
    context, watch = open_context(browser, server, viewport={"width": 375, "height": 667}, color_scheme=scheme)
    try:
        page = context.new_page()
        open_page(page, server + PATH + "?preset=no-previous-token-head")
        page.locator(".lm-table-box summary").click()
        violations = run_axe(page)
        assert violations == [], json.dumps(violations, indent=1)
        assert_clean(watch)
    finally:
        context.close()


HEADER_BOTTOM = "() => document.querySelector('.md-header').getBoundingClientRect().bottom"
CANVASES = "() => Array.from(document.querySelectorAll('.lm-maps canvas')).map(c => c.toDataURL())"


@pytest.mark.parametrize("width", [375, 1280])
def test_a_switch_changes_what_is_in_view(browser: Any, server: str, width: int) -> None:
    """Scrolled down to the heads (their group's top just under the header), a reader who switches a head off
    sees every change it makes: the summary, the head's own map and the maps of the layer that reads it, all
    measured inside the viewport after the click, which scrolls nothing."""
    height = 667 if width == 375 else 800
    context, watch = open_context(browser, server, viewport={"width": width, "height": height}, is_mobile=width < 600)
    try:
        page = context.new_page()
        open_page(page, server + PATH + "?preset=induction")
        top = page.evaluate("() => document.querySelector('.lm-heads').getBoundingClientRect().top")
        page.evaluate("y => window.scrollBy(0, y)", top - page.evaluate(HEADER_BOTTOM) - 8)
        before = {"summary": page.locator(".lm-summary").inner_text(), "maps": page.evaluate(CANVASES)}
        scrolled = page.evaluate("() => window.scrollY")
        head = f"L0H{live_model.findings()['previous'][0]}"
        page.locator(f".lm-heads input[data-head='{head}']").click()
        page.wait_for_function("s => document.querySelector('.lm-summary').textContent !== s", arg=before["summary"])
        assert page.evaluate("() => window.scrollY") == scrolled, "the switch scrolled the page"
        maps = page.evaluate(CANVASES)
        redrawn = [i for i, (a, b) in enumerate(zip(before["maps"], maps, strict=True)) if a != b]
        changed = [".lm-summary", f".lm-map:has(canvas[data-head='{head}'])"] + [
            f".lm-maps figure:nth-child({i + 1}) canvas" for i in redrawn
        ]
        assert len(changed) > 2, "switching the previous-token head off changed no map"
        top_edge = page.evaluate(HEADER_BOTTOM)
        for selector in changed:
            box = page.locator(selector).bounding_box()
            assert box is not None
            assert top_edge - 1 <= box["y"] and box["y"] + box["height"] <= height + 1, (
                f"at {width} px, {selector} changed out of view: {box}, viewport {top_edge:.0f} to {height}"
            )
        assert_clean(watch)
    finally:
        context.close()


def test_the_legends_come_before_what_they_explain(page: Any, context: tuple[Any, Watch], server: str) -> None:
    open_page(page, server + PATH + "?preset=induction")
    order = page.evaluate(
        """() => {
          const find = words => Array.from(document.querySelectorAll('article p'))
            .find(p => p.textContent.includes(words));
          const before = (a, b) => Boolean(a && b && (a.compareDocumentPosition(b) & Node.DOCUMENT_POSITION_FOLLOWING));
          const maps = find('darker = more weight'), tokens = find('Green tokens were predicted right');
          return {maps: before(maps, document.querySelector('.lm-maps canvas')),
                  tokens: before(tokens, document.querySelector('.lm-tokens .lm-token'))};
        }"""
    )
    assert order == {"maps": True, "tokens": True}
    assert_clean(context[1])


def test_off_without_tokens_is_applied_and_said(page: Any, context: tuple[Any, Watch], server: str) -> None:
    """A link with ?off= and no tokens= switches those heads off in the first preset's sequence and says so."""
    first = live_model.presets()[0]
    open_page(page, server + PATH + "?off=L1H2,L1H0")
    off = page.locator(".lm-heads input:not(:checked)").evaluate_all("els => els.map(e => e.dataset.head)")
    assert sorted(off) == ["L1H0", "L1H2"]
    assert page.locator(".lm-token").evaluate_all("els => els.map(e => Number(e.textContent))") == first["tokens"]
    message = page.locator(".lm-message").inner_text()
    assert "Switched off L1H0, L1H2 as the link asks" in message and "no tokens=" in message, message
    expected = live_model._outcome(tuple(first["tokens"]), ("L1H0", "L1H2"))  # PyTorch through lessons_src
    n, loss, hits = summary_numbers(page)
    assert (n, hits) == (expected["n"], expected["hits"]) and loss == pytest.approx(expected["loss"], abs=0.006)
    page.wait_for_function("() => location.search.includes('tokens=') && location.search.includes('off=L1H0,L1H2')")
    # an unknown head in such a link is named, as an error
    open_page(page, server + PATH + "?off=L1H0,L9H9")
    message = page.locator(".lm-message")
    assert "L9H9" in message.inner_text() and "is-error" in (message.get_attribute("class") or "")
    assert_clean(context[1])
