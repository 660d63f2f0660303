"""The text model page (docs/practice/live-text-model.md): the byte-level GPT running in the browser.

The page runs the weights the build exports: each matrix of the committed float16 checkpoint in int8 with a
float16 scale per group of 32 values of a row (``lessons_src.lab.text_model_int8.export``). The reference here
is PyTorch running those same weights, dequantized (``text_model_int8.exported_model``: ``load_text_model`` with the
exported weights loaded, ``ablate_heads`` for switched-off heads), computed at test time. The page computes
in float64 on the same weights, so the two agree to within ``text_model_int8.PROB_ATOL`` (the tolerance the
page prints). What int8 itself changes, against the committed float16 weights, is measured separately
(``live_text_model.int8_error``) and bounded by ``INT8_PROB_BOUND``:

* the export: int8 values times their scales are within half a step of the committed weights, the other
  tensors are the committed float16 values, and the page's file is that export;
* int8 against the committed weights: every next-byte probability over the test texts within
  ``INT8_PROB_BOUND``, and greedy writing differs only from a step whose two likeliest bytes were within it;

* the tokenizer: the page's bytes are Python's ``text.encode()`` (non-ASCII included), and its decoding of
  invalid UTF-8 is Python's ``errors="replace"``;
* next-byte probabilities and attention weights at every position, with and without switched-off heads;
* greedy writing equals PyTorch's wherever each step's two likeliest bytes are more than the tolerance apart;
* the widget: a head switched off by keyboard changes the bars, the written text and its map, as PyTorch does;
  the whole state (text, heads off, mode, temperature, seed) comes back from the URL, on reload too, at 375 px,
  with no request leaving the site; a link's CRLF becomes the LF the text box shows, and the model runs on that.

One page load serves each group of checks (a module-scoped page for the model-level ones). The page answers
through a Web Worker, so the hook's run, generate and bench return Promises, and ``idle`` waits until the
widget has drawn its current state.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import live_text_model as ltm
import model_files
import pytest
import torch
from browser_support import SITE, goto, open_context, site_pages

from lessons_src.lab import text_model_int8 as int8
from lessons_src.lab.heads import ablate_heads
from lessons_src.lab.text_model import decode, encode, load_text_model

PATH = "practice/live-text-model/"
TEXTS = [
    "Multi-head attention",
    "The query looks at every key.",
    "héllo wörld, naïve café",
    "日本語のテキスト",
    "emoji 🙂 and €100 — «quotes»",
    "tab\tand\nnewline",
]


@pytest.fixture(scope="module")
def model() -> Any:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model run step by step: one thread is several times faster on a busy machine
    yield int8.exported_model()  # the weights the page runs
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def live(browser: Any, server: str) -> Any:
    """One desktop page with the model loaded, shared by the model-level checks."""
    context, watch = open_context(browser, server, viewport={"width": 1280, "height": 800})
    page = context.new_page()
    goto(page, server + PATH)
    page.evaluate("() => window.liveTextModel.ready")
    yield page
    problems = watch.problems()
    context.close()
    assert problems == {}, f"the browser reported problems: {problems}"


def keep_for(model: Any, off: list[str]) -> torch.Tensor:
    keep = torch.ones(model.cfg.num_layers, model.cfg.num_heads)
    for name in off:
        layer, head = (int(v) for v in name[1:].split("H"))
        keep[layer, head] = 0.0
    return keep


def reference(model: Any, text: str, off: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """PyTorch's next-byte probabilities (T, 256) and attention weights (L, H, T, T), heads ``off`` ablated."""
    with torch.no_grad(), ablate_heads(model.attentions, keep_for(model, off)):
        logits, weights = model(encode(text)[None], need_weights=True)
    assert weights is not None
    return torch.softmax(logits[0].double(), dim=-1), weights[:, 0].double()


def greedy(model: Any, text: str, n: int, off: list[str]) -> tuple[list[int], float]:
    """PyTorch's greedy bytes after ``text`` and the smallest top-2 probability margin over the steps."""
    with ablate_heads(model.attentions, keep_for(model, off)):
        ids, margins = ltm.greedy_with_margins(model, text, n)
    return ids, min(margins)


def test_the_page_is_in_the_site_and_its_weights_are_the_checkpoint_in_int8() -> None:
    """The page's file is the export; int8 times scale is the committed value to within half a step."""
    assert PATH in site_pages()
    data, meta, stem = int8.export()
    assert (SITE / model_files.MODEL_DIR / f"{stem}.bin").read_bytes() == data
    assert f"{stem}.json" in (SITE / PATH / "index.html").read_text(encoding="utf-8")
    stored, exported = int8.stored(), int8.exported_state()
    assert sorted(stored) == sorted(exported) == sorted(load_text_model().state_dict())
    quantized = 0
    for spec in meta["tensors"]:
        committed, got = stored[spec["name"]].float(), exported[spec["name"]]
        if spec["dtype"] == "int8":
            rows = committed.shape[0]
            step = committed.reshape(rows, -1, int8.GROUP).abs().amax(-1, keepdim=True) / 127  # (R, C/G, 1)
            err = (committed - got).reshape(rows, -1, int8.GROUP).abs()
            assert bool((err <= 0.5 * step * 1.001 + 1e-12).all()), spec["name"]  # 1.001: the scale is float16
            quantized += committed.numel()
        else:
            assert torch.equal(committed, got), spec["name"]
    assert quantized > 0.95 * sum(t.numel() for t in stored.values())  # the matrices, nearly every weight
    assert len(data) < 0.6 * 2 * sum(t.numel() for t in stored.values())  # well under the float16 file


def test_int8_against_the_committed_weights() -> None:
    """int8 moves no probability by more than the stated bound; greedy text parts only at a near-tie."""
    error = ltm.int8_error()
    assert 0 < error["max_dp"] <= int8.INT8_PROB_BOUND, error
    for d in error["diverged"]:  # the committed model's two likeliest bytes were within the bound there
        assert d["margin"] <= int8.INT8_PROB_BOUND, d
    assert error["greedy_same"] + len(error["diverged"]) == error["texts"] == len(int8.TEXTS)


def test_tokenizer_equals_python(live: Any) -> None:
    for text in TEXTS:
        assert live.evaluate("t => window.liveTextModel.encode(t)", text) == list(text.encode("utf-8")), text
    # Invalid UTF-8 decodes as Python's errors="replace" does (U+FFFD per maximal invalid part).
    for raw in ([0xC3], [0xFF, 0x41], [0xE2, 0x82], [0x41, 0xE2, 0x82, 0xAC, 0xF0, 0x9F], [0xED, 0xA0, 0x80]):
        assert live.evaluate("b => window.liveTextModel.decode(b)", raw) == decode(raw), raw


CASES = [
    ("Multi-head attention", []),
    ("The query looks at every key. The query looks at every key.", []),
    ("The query looks at every key. The query looks at every key.", ["L1H0", "L1H1", "L1H2", "L1H3"]),
    ("héllo wörld, naïve café", ["L0H1"]),
    ("emoji 🙂 and €100 — «quotes»", ["L0H0", "L0H3", "L1H2"]),
    ("x", ["L0H0", "L0H1", "L0H2", "L0H3", "L1H0", "L1H1", "L1H2", "L1H3"]),
    ("a" * ltm.MAX_TEXT_BYTES, []),
]


def test_probabilities_and_attention_equal_pytorch(live: Any, model: Any) -> None:
    worst = 0.0
    for text, off in CASES:
        got = live.evaluate("([t, off]) => window.liveTextModel.run(t, off)", [text, off])
        probs, weights = reference(model, text, off)
        torch.testing.assert_close(torch.tensor(got["probs"], dtype=torch.float64), probs, atol=int8.PROB_ATOL, rtol=0)
        torch.testing.assert_close(
            torch.tensor(got["attention"], dtype=torch.float64), weights, atol=int8.PROB_ATOL, rtol=0
        )
        worst = max(worst, float((torch.tensor(got["probs"], dtype=torch.float64) - probs).abs().max()))
    assert worst > 0  # the comparison is of two computations, not of a copy
    # Switching heads off changes the probabilities (the comparison above is not vacuous).
    on = live.evaluate("t => window.liveTextModel.run(t, [])", CASES[1][0])["probs"]
    off = live.evaluate("([t, o]) => window.liveTextModel.run(t, o)", list(CASES[2]))["probs"]
    assert on != off


def test_greedy_text_equals_pytorch(live: Any, model: Any) -> None:
    checked = 0
    n = ltm.GENERATE_BYTES
    for text, off in CASES[:5]:
        expected, margin = greedy(model, text, n, off)
        got = live.evaluate("([t, n, off]) => window.liveTextModel.generate(t, n, off, 0, 1)", [text, n, off])
        if margin > int8.PROB_ATOL:  # every step's choice is beyond the tolerance: the bytes must agree
            assert got["bytes"] == expected, (text, off, decode(got["bytes"]), decode(expected))
            assert got["text"] == decode(encode(text).tolist() + expected)
            checked += 1
    assert checked >= 4, f"only {checked} cases had a top-2 margin above {int8.PROB_ATOL} at every step"


def widget_state(page: Any) -> dict[str, Any]:
    return page.evaluate(
        """() => ({
          bars: Array.from(document.querySelectorAll('.ltm-bar')).map(b => b.textContent),
          generated: document.querySelector('.ltm-generated').textContent,
          map: (() => { const c = document.querySelector('.ltm-maps canvas[data-head="L1H0"]');
                        return Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data).join(); })(),
          search: location.search,
        })"""
    )


def test_a_head_switched_off_by_keyboard_updates_everything(page: Any, server: str, model: Any) -> None:
    text = "The query looks at every key. The query looks at every key."
    goto(page, server + PATH + "?" + urlencode({"text": text}))
    page.evaluate("() => window.liveTextModel.ready")
    before = widget_state(page)
    # The first-block head whose removal changes PyTorch's greedy text most (the second block reads its output).
    plain, _ = greedy(model, text, ltm.GENERATE_BYTES, [])
    head = max(
        (f"L0H{h}" for h in range(model.cfg.num_heads)),
        key=lambda name: sum(
            a != b for a, b in zip(plain, greedy(model, text, ltm.GENERATE_BYTES, [name])[0], strict=True)
        ),
    )
    box = page.locator(f".ltm-heads input[data-head='{head}']")
    box.focus()
    page.keyboard.press("Space")
    assert not box.is_checked()
    page.evaluate("() => window.liveTextModel.idle")
    after = widget_state(page)
    assert after["bars"] != before["bars"]
    assert after["generated"] != before["generated"]
    assert after["map"] != before["map"]  # layer 1 reads what layer 0 wrote
    expected, margin = greedy(model, text, ltm.GENERATE_BYTES, [head])
    if margin > int8.PROB_ATOL:
        assert after["generated"] == decode(encode(text).tolist() + expected)[len(text) :]
    probs, _ = reference(model, text, [head])
    top = probs[-1].topk(ltm.TOP_K)
    shown = [float(b.split()[-1].rstrip("%")) for b in page.locator(".ltm-p").all_inner_texts()]
    assert shown == pytest.approx([round(100 * float(p), 1) for p in top.values], abs=0.051)
    page.wait_for_function("h => new URLSearchParams(location.search).get('off') === h", arg=head)
    page.locator(".ltm-restore").click()
    page.evaluate("() => window.liveTextModel.idle")
    assert widget_state(page)["generated"] == before["generated"]


def test_the_url_state_comes_back_on_reload_at_375(browser: Any, server: str) -> None:
    state = {"text": "héllo\r\nwörld", "off": "L0H1,L1H3", "mode": "sample", "temp": "0.5", "seed": "42"}
    shown = "héllo\nwörld"  # a textarea holds LF only: the model must run on that text, not on the link's CRLF
    context, watch = open_context(
        browser, server, viewport={"width": 375, "height": 667}, is_mobile=True, has_touch=True
    )
    origin = server.split("/", 3)[:3]
    requests: list[str] = []
    try:
        page = context.new_page()
        page.on("request", lambda r: requests.append(r.url))
        goto(page, server + PATH + "?" + urlencode(state))
        page.evaluate("() => window.liveTextModel.ready")
        for attempt in ("load", "reload"):
            assert page.locator(".ltm-text").input_value() == shown, attempt
            assert page.locator(".ltm-message").inner_text().startswith(f"{len(shown.encode())} bytes."), attempt
            off = page.locator(".ltm-heads input:not(:checked)").evaluate_all("els => els.map(e => e.dataset.head)")
            assert sorted(off) == ["L0H1", "L1H3"], attempt
            assert page.locator("input[name=ltm-mode][value=sample]").is_checked(), attempt
            assert page.locator(".ltm-temp").input_value() == "0.5"
            assert page.locator(".ltm-seed").input_value() == "42"
            expected = page.evaluate(
                "async t => (await window.liveTextModel.generate("
                f"t, {ltm.GENERATE_BYTES}, ['L0H1', 'L1H3'], 0.5, 42)).text",
                shown,
            )
            assert page.locator(".ltm-prompt").inner_text() + page.locator(".ltm-generated").inner_text() == expected
            other = page.evaluate(
                "async t => (await window.liveTextModel.generate("
                f"t, {ltm.GENERATE_BYTES}, ['L0H1', 'L1H3'], 0.5, 43)).text",
                shown,
            )
            assert other != expected  # the seed matters
            widths = page.evaluate("[document.documentElement.scrollWidth, document.documentElement.clientWidth]")
            assert widths[0] <= widths[1], f"the page scrolls sideways at 375 px: {widths}"
            page.wait_for_function("() => new URLSearchParams(location.search).get('seed') === '42'")
            page.wait_for_function("t => new URLSearchParams(location.search).get('text') === t", arg=shown)
            page.reload()
            page.evaluate("() => window.liveTextModel.ready")
        leaving = [u for u in requests if u.split("/", 3)[:3] != origin and not u.startswith("data:")]
        assert leaving == [], f"requests left the site: {leaving}"
        assert watch.problems() == {}
    finally:
        context.close()


def test_bad_input_gets_a_message(live: Any) -> None:
    def message_after(text: str) -> str:
        live.locator(".ltm-text").fill(text)
        live.evaluate("() => window.liveTextModel.idle")
        return str(live.locator(".ltm-message").inner_text())

    assert "empty" in message_after("")
    message = message_after("é" * ltm.MAX_TEXT_BYTES)
    assert f"{2 * ltm.MAX_TEXT_BYTES} bytes" in message and f"at most {ltm.MAX_TEXT_BYTES}" in message
    assert "2 bytes" in message_after("ok")
    with pytest.raises(Exception, match="unknown heads"):
        live.evaluate("() => window.liveTextModel.run('ok', ['L9H0'])")


def test_the_script_loads_only_where_shown_and_after_instant_navigation(page: Any, server: str) -> None:
    """widget-scripts.js loads the live models' scripts on their pages only: a lesson that links this page
    (choosing-keys) fetches neither; a click on its link (Material's instant navigation, no full load) brings the
    widget up all the same, drawn and answering. (The home page now links each section's first page only.)"""
    fetched: list[str] = []
    page.on("request", lambda r: fetched.append(r.url))
    goto(page, server + "lessons/choosing-keys/")
    assert [u for u in fetched if u.endswith(("live-model.js", "live-text-model.js"))] == []
    page.evaluate("() => { window.__sameDocument = true; }")  # gone if the click caused a full load
    page.locator(f'article a[href$="{PATH}"]').first.click()
    page.wait_for_function("() => window.liveTextModel !== undefined", timeout=30_000)
    page.evaluate("() => window.liveTextModel.ready")
    assert page.evaluate("() => window.__sameDocument === true"), "the click reloaded the page"
    assert page.evaluate(f"() => location.pathname.endsWith('{PATH}')")
    shape = page.evaluate("() => window.liveTextModel.run('Multi').then(r => [r.probs.length, r.probs[0].length])")
    assert shape == [5, 256]  # a next-byte distribution after each of the 5 bytes
    assert [u for u in fetched if u.endswith("live-model.js")] == []


def test_on_a_phone_the_writing_stays_in_view_and_the_maps_are_readable(browser: Any, server: str) -> None:
    """At 375x667, with the text box just under the header, what the model writes starts in the upper half of the
    screen (the half a phone's keyboard leaves while the reader types); each head's map is at least 150 px wide,
    and the maps' axes are named in text of at least 12 px."""
    context, watch = open_context(
        browser, server, viewport={"width": 375, "height": 667}, is_mobile=True, has_touch=True
    )
    try:
        page = context.new_page()
        goto(page, server + PATH)
        page.evaluate("() => window.liveTextModel.ready")
        page.locator(".ltm-text").focus()
        page.keyboard.type(" is")
        layout = page.evaluate(
            """() => {
                const header = document.querySelector('.md-header').getBoundingClientRect().bottom;
                const box = document.querySelector('.ltm-text');
                window.scrollBy(0, box.getBoundingClientRect().top - header);
                const axes = document.querySelector('.ltm-axes');
                return {header, box: box.getBoundingClientRect().top,
                        written: document.querySelector('.ltm-generated').getBoundingClientRect().top,
                        maps: [...document.querySelectorAll('.ltm-map canvas')]
                            .map(c => c.getBoundingClientRect().width),
                        axes: axes && axes.checkVisibility() ? axes.textContent : null,
                        axesSize: axes ? parseFloat(getComputedStyle(axes).fontSize) : 0};
            }"""
        )
        assert abs(layout["box"] - layout["header"]) < 2, layout
        assert layout["written"] < 667 / 2, f"the written text starts {layout['written']:.0f} px down a 667-px screen"
        assert layout["maps"] and min(layout["maps"]) >= 150, f"head maps {layout['maps']} px wide at 375"
        assert layout["axes"] and "row" in layout["axes"] and "column" in layout["axes"], layout["axes"]
        assert layout["axesSize"] >= 12, layout
        assert watch.problems() == {}
    finally:
        context.close()
