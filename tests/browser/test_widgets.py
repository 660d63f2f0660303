"""The practice widgets, driven like a reader drives them: mouse, keyboard, printing.

Each test reaches its widget's page the way a reader does, by clicking the link in the navigation from the
home page, so the page arrives through Material's instant navigation (no full reload) and the widget must
initialise on that swap. A test is skipped only when no built page carries the widget's DOM hook.
"""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from browser_support import Watch, page_file, site_pages


def widget_page(hook: str) -> str:
    """The first built page whose HTML has the attribute `hook` (e.g. data-quiz), or skip."""
    attribute = re.compile(rf"<[^>]*\s{re.escape(hook)}(?=[\s=>])")
    for path in site_pages():
        if attribute.search(page_file(path).read_text(encoding="utf-8")):
            return path
    pytest.skip(f"no page of the built site has a [{hook}] widget yet (the practice pages of issue 6 add them)")


def open_by_navigation(page: Any, server: str, path: str) -> None:
    """Open the home page, then click the nav link to `path`; assert the page was swapped in, not reloaded."""
    page.goto(server, wait_until="networkidle")
    page.evaluate("window.__not_reloaded = true")
    target = server + path
    links = page.locator("nav.md-nav--primary a.md-nav__link")
    hrefs = links.evaluate_all("as => as.map(a => a.href)")
    assert target in hrefs, f"no navigation link to {path} on the home page"
    link = links.nth(hrefs.index(target))
    link.scroll_into_view_if_needed()
    title = re.search(r"<title>(.*?)</title>", page_file(path).read_text(encoding="utf-8"), re.S)
    assert title is not None
    link.click()
    page.wait_for_url(target)
    # The URL changes before the new content is swapped in; the title changes with the content.
    page.wait_for_function("t => document.title === t", arg=html.unescape(title.group(1)))
    page.wait_for_load_state("networkidle")
    assert page.evaluate("window.__not_reloaded === true"), "the navigation reloaded the page"


def assert_clean(watch: Watch) -> None:
    assert watch.problems() == {}, f"the browser reported problems: {watch.problems()}"


def test_flashcards_flip_by_click_and_keyboard(page: Any, context: tuple[Any, Watch], server: str) -> None:
    path = widget_page("data-flashcards")
    open_by_navigation(page, server, path)
    cards = page.locator("[data-flashcards] button.flashcard")
    assert cards.count() >= 2
    first, second = cards.nth(0), cards.nth(1)
    assert first.get_attribute("aria-pressed") == "false"
    front = first.inner_text()
    first.click()
    assert first.get_attribute("aria-pressed") == "true"
    assert first.inner_text() != front or first.evaluate("e => getComputedStyle(e).transform") != "none"
    first.click()
    assert first.get_attribute("aria-pressed") == "false"
    second.focus()
    page.keyboard.press("Enter")
    assert second.get_attribute("aria-pressed") == "true"
    page.keyboard.press("Space")
    assert second.get_attribute("aria-pressed") == "false"
    # Tab reaches the cards: they are real buttons in the focus order.
    first.focus()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.classList.contains('flashcard')")
    assert_clean(context[1])


def count_pdf_pages(pdf: bytes) -> int:
    pages = len(re.findall(rb"/Type\s*/Page(?![a-zA-Z])", pdf))
    counts = [int(n) for n in re.findall(rb"/Type\s*/Pages\b[^>]*?/Count\s+(\d+)", pdf, re.S)]
    counts += [int(n) for n in re.findall(rb"/Count\s+(\d+)[^>]*?/Type\s*/Pages\b", pdf, re.S)]
    return max([pages, *counts])


def test_printing_the_flashcards_gives_one_page_per_card(page: Any, context: tuple[Any, Watch], server: str) -> None:
    path = widget_page("data-flashcards")
    open_by_navigation(page, server, path)
    n_cards = page.locator("[data-flashcards] button.flashcard").count()
    # The print button asks the browser to print (stubbed here: headless Chromium has no print dialog).
    page.evaluate("() => { window.__printed = 0; window.print = () => { window.__printed += 1; }; }")
    page.locator("[data-print-flashcards]").click()
    assert page.evaluate("window.__printed") == 1
    pdf = page.pdf(format="A4", print_background=True)
    assert pdf.startswith(b"%PDF")
    assert count_pdf_pages(pdf) == n_cards, f"{n_cards} cards printed on {count_pdf_pages(pdf)} pages"
    assert_clean(context[1])


def test_quiz_gives_feedback_and_a_score(page: Any, context: tuple[Any, Watch], server: str) -> None:
    path = widget_page("data-quiz")
    open_by_navigation(page, server, path)
    quiz = page.locator("[data-quiz]").first
    questions = quiz.locator(".quiz-question")
    n = questions.count()
    assert n >= 2
    expected_correct = 0
    for i in range(n):
        q = questions.nth(i)
        feedback = q.locator(".quiz-feedback")
        assert feedback.inner_text().strip() == ""
        radio = q.locator("label input[type=radio]").first
        radio.locator("xpath=ancestor::label[1]").click()  # a reader clicks the label text
        assert radio.is_checked()
        assert feedback.inner_text().strip() != "", f"question {i + 1}: no feedback after answering"
        assert feedback.is_visible()
        expected_correct += radio.get_attribute("data-correct") == "true"
    score = quiz.locator("[data-quiz-score]").inner_text()
    numbers = [int(x) for x in re.findall(r"\d+", score)]
    assert numbers and numbers[0] == expected_correct and n in numbers, f"score {score!r} after {n} answers"
    # Answering every question right gives a full score, and the feedback says so.
    for i in range(n):
        q = questions.nth(i)
        right = q.locator("input[type=radio][data-correct=true]")
        if right.count() == 0:
            pytest.fail(f"the quiz marks no right answer (data-correct) for question {i + 1}")
        right.first.locator("xpath=ancestor::label[1]").click()
    numbers = [int(x) for x in re.findall(r"\d+", quiz.locator("[data-quiz-score]").inner_text())]
    assert numbers[0] == n
    assert_clean(context[1])


def key_weights(page: Any) -> list[float]:
    values = page.locator("[data-head-explorer] [data-weight]").evaluate_all(
        "els => els.map(e => e.getAttribute('data-weight'))"
    )
    return [float(v) for v in values]


def test_head_explorer_responds_to_hover_and_focus(page: Any, context: tuple[Any, Watch], server: str) -> None:
    path = widget_page("data-head-explorer")
    open_by_navigation(page, server, path)
    root = page.locator("[data-head-explorer]").first
    for name in ("sentence", "layer", "head"):
        assert root.locator(f"select[name={name}]").count() == 1, f"the explorer has no {name} selector"
    tokens = root.locator(".hx-token")
    assert tokens.count() >= 3
    assert key_weights(page) == []  # nothing highlighted before the reader points at a token

    tokens.nth(0).hover()
    hovered = key_weights(page)
    assert hovered, "hovering a token highlighted nothing"
    assert all(0.0 <= w <= 1.0 for w in hovered)
    # Attention weights of one query over its keys sum to 1 (shown to two decimals).
    assert abs(sum(hovered) - 1.0) <= 0.006 * len(hovered) + 0.01, hovered

    page.mouse.move(0, 0)
    last = tokens.count() - 1
    tokens.nth(last).focus()
    assert page.evaluate("document.activeElement.classList.contains('hx-token')")
    focused = key_weights(page)
    assert focused and abs(sum(focused) - 1.0) <= 0.006 * len(focused) + 0.01
    assert focused != hovered, "focusing another token did not change the highlighted weights"

    # Another head attends differently: some other head changes the weights of the same token.
    head = root.locator("select[name=head]")
    options = [v for v in head.locator("option").evaluate_all("os => os.map(o => o.value)") if v != head.input_value()]
    seen = []
    for value in options[:4]:
        head.select_option(value)
        root.locator(".hx-token").nth(last).focus()
        seen.append(key_weights(page))
    assert any(w and w != focused for w in seen), "changing the head never changed the weights"
    assert_clean(context[1])
