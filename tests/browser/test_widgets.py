"""The practice widgets, driven like a reader drives them: mouse, keyboard, printing.

Each test reaches its widget's page the way a reader does, by clicking the link in the navigation from the
home page, so the page arrives through Material's instant navigation (no full reload) and the widget must
initialise on that swap. A test is skipped only when no built page carries the widget's DOM hook.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest
from browser_support import Watch, goto, open_by_navigation, open_context, page_file, reload, settle, site_pages
from views import PHONE_SKIPS_RULES, run_axe


def widget_page(hook: str) -> str:
    """The first built page whose HTML has the attribute `hook` (e.g. data-quiz), or skip."""
    attribute = re.compile(rf"<[^>]*\s{re.escape(hook)}(?=[\s=>])")
    for path in site_pages():
        if attribute.search(page_file(path).read_text(encoding="utf-8")):
            return path
    pytest.skip(f"no page of the built site has a [{hook}] widget yet (the practice pages of issue 6 add them)")


def assert_clean(watch: Watch) -> None:
    assert watch.problems() == {}, f"the browser reported problems: {watch.problems()}"


def box(locator: Any) -> tuple[float, float]:
    """(top, height) of an element on the page, in CSS pixels."""
    r = locator.bounding_box()
    assert r is not None
    return (round(r["y"] + locator.page.evaluate("window.scrollY"), 1), round(r["height"], 1))


def test_flashcards_flip_by_click_and_keyboard(page: Any, context: tuple[Any, Watch], server: str) -> None:
    path = widget_page("data-flashcards")
    open_by_navigation(page, server, path)
    cards = page.locator("[data-flashcards] button.flashcard")
    assert cards.count() >= 2
    first, second = cards.nth(0), cards.nth(1)
    assert first.get_attribute("aria-pressed") == "false"
    question, answer = first.locator(".flashcard-front"), first.locator(".flashcard-back")
    assert question.is_visible() and not answer.is_visible()
    before = {"card": box(first), "next": box(second)}
    first.click()
    assert first.get_attribute("aria-pressed") == "true"
    # The answer shows under the question, which stays in view; its space was reserved, so nothing moves.
    assert question.is_visible() and answer.is_visible()
    assert {"card": box(first), "next": box(second)} == before, "showing the answer moved the page"
    first.click()
    assert first.get_attribute("aria-pressed") == "false" and not answer.is_visible()
    second.focus()
    page.keyboard.press("Enter")
    assert second.get_attribute("aria-pressed") == "true"
    page.keyboard.press("Space")
    assert second.get_attribute("aria-pressed") == "false"
    # Tab goes from a card to its two marks, then to the next card: all real buttons in the focus order.
    first.focus()
    for expected in ("known", "again"):
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.getAttribute('data-mark')") == expected
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.classList.contains('flashcard')")
    assert_clean(context[1])


def card_ids(page: Any, visible_only: bool = False) -> list[str]:
    items = page.locator("[data-flashcards] li.flashcard-item")
    return [i for i, shown in items.evaluate_all("els => els.map(e => [e.getAttribute('data-card-id'), !e.hidden])")
            if shown or not visible_only]


def pressed_marks(page: Any) -> dict[str, str]:
    pairs = page.locator("[data-flashcards] li.flashcard-item").evaluate_all(
        "els => els.map(e => [e.getAttribute('data-card-id'),"
        " (e.querySelector('[data-mark][aria-pressed=true]') || {}).dataset?.mark || null])"
    )
    return {cid: mark for cid, mark in pairs if mark}


def mark(page: Any, card_id: str, which: str) -> None:
    page.locator(f'[data-flashcards] li[data-card-id="{card_id}"] [data-mark="{which}"]').click()


def test_flashcard_marks_survive_a_reload_and_drive_the_study_mode(
    page: Any, context: tuple[Any, Watch], server: str
) -> None:
    path = widget_page("data-flashcards")
    open_by_navigation(page, server, path)
    ids = card_ids(page)
    assert pressed_marks(page) == {}
    # Nothing marked "again" yet: the study mode explains and changes nothing.
    study = page.locator("[data-study-again]")
    study.click()
    assert study.get_attribute("aria-pressed") == "false" and card_ids(page, visible_only=True) == ids
    assert "No card is marked" in page.locator("[data-flashcards-status]").inner_text()

    mark(page, ids[0], "again")
    mark(page, ids[1], "known")
    mark(page, ids[2], "again")
    mark(page, ids[3], "known")
    mark(page, ids[3], "known")  # pressing a pressed mark takes it back
    expected = {ids[0]: "again", ids[1]: "known", ids[2]: "again"}
    assert pressed_marks(page) == expected
    reload(page)
    assert pressed_marks(page) == expected, "the marks did not survive a reload"
    assert "1 marked “knew it”, 2 marked “again”" in page.locator("[data-flashcards-status]").inner_text()

    study.click()
    assert study.get_attribute("aria-pressed") == "true"
    assert card_ids(page, visible_only=True) == [ids[0], ids[2]]
    numbers = page.locator("[data-flashcards] li.flashcard-item:not([hidden]) .flashcard-number").all_text_contents()
    assert numbers == ["Card 1 of 2", "Card 2 of 2"]
    study.click()
    assert card_ids(page, visible_only=True) == ids

    page.locator("[data-reset-marks]").click()
    assert pressed_marks(page) == {}
    assert page.evaluate("localStorage.getItem('mha-flashcards-marks')") is None
    reload(page)
    assert pressed_marks(page) == {}
    assert_clean(context[1])


def test_flashcards_shuffle(page: Any, context: tuple[Any, Watch], server: str) -> None:
    path = widget_page("data-flashcards")
    open_by_navigation(page, server, path)
    before = card_ids(page)
    page.locator("[data-shuffle-flashcards]").click()
    after = card_ids(page)
    assert sorted(after) == sorted(before) and after != before
    numbers = page.locator("[data-flashcards] .flashcard-number").all_text_contents()
    assert numbers == [f"Card {i} of {len(after)}" for i in range(1, len(after) + 1)]
    assert_clean(context[1])


def click_nav(page: Any, server: str, path: str) -> None:
    links = page.locator("nav.md-nav--primary a.md-nav__link")
    hrefs = links.evaluate_all("as => as.map(a => a.href)")
    link = links.nth(hrefs.index(server + path))
    link.scroll_into_view_if_needed()
    link.click()
    page.wait_for_url(server + path)
    title = re.search(r"<title>(.*?)</title>", page_file(path).read_text(encoding="utf-8"), re.S)
    assert title is not None
    page.wait_for_function("t => document.title === t", arg=html.unescape(title.group(1)))
    settle(page)


def test_widgets_survive_instant_navigation_between_pages(
    page: Any, context: tuple[Any, Watch], server: str
) -> None:
    cards, quiz = widget_page("data-flashcards"), widget_page("data-quiz")
    open_by_navigation(page, server, cards)
    first = card_ids(page)[0]
    mark(page, first, "again")
    click_nav(page, server, quiz)  # instant navigation to the quiz...
    assert page.locator("[data-quiz]").get_attribute("data-seed"), "the quiz was not set up after navigation"
    q = page.locator("[data-quiz] .quiz-question").first
    q.locator("input[type=radio]").first.locator("xpath=ancestor::label[1]").click()
    assert q.locator(".quiz-feedback").inner_text().strip() != ""
    click_nav(page, server, cards)  # ...and back: the marks are read again and still work
    assert pressed_marks(page) == {first: "again"}
    page.locator("[data-study-again]").click()
    assert card_ids(page, visible_only=True) == [first]
    status = page.locator("[data-flashcards-status]").inner_text()
    assert "Studying the 1 card marked “again”" in status, status  # singular: it said "the 1 cards"
    page.locator("[data-flashcards] button.flashcard").first.click()
    assert page.locator("[data-flashcards] button.flashcard").first.get_attribute("aria-pressed") == "true"
    assert page.evaluate("window.__not_reloaded === true"), "a navigation reloaded the page"
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
    # Every card but the deck's last ends with a page break, whatever the fonts (a short card and the next
    # part's first card would otherwise share a page where the text is narrow enough to fit both).
    page.emulate_media(media="print")
    breaks = page.locator("[data-flashcards] li.flashcard-item").evaluate_all(
        "items => items.map(li => getComputedStyle(li).breakAfter)"
    )
    assert len(breaks) == n_cards and breaks[-1] == "auto", breaks
    assert [i + 1 for i, b in enumerate(breaks[:-1]) if b != "page"] == [], "cards printed without a page break after"
    pdf = page.pdf(format="A4", print_background=True)
    page.emulate_media(media="null")
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
    wording = re.compile(rf"^(\d+) of {n} answered, (\d+) correct$")
    score = quiz.locator("[data-quiz-score]")
    assert wording.match(score.inner_text()) and score.inner_text() == f"0 of {n} answered, 0 correct"
    parts = quiz.locator("details.quiz-part")
    assert parts.count() >= 2 and questions.nth(n - 1).is_hidden(), "the quiz's later parts start folded"
    for i in range(parts.count()):  # a reader opens each part by its summary
        if parts.nth(i).get_attribute("open") is None:
            parts.nth(i).locator("summary").click()
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
        assert score.inner_text() == f"{i + 1} of {n} answered, {expected_correct} correct"  # same wording
    assert expected_correct < n, "the first option was right everywhere: the options were not shuffled"
    # Answering every question right gives a full score. The first pass clicked as a reader does, one question at a
    # time; this one clicks every right answer's label in one round trip (the same click event on the same label).
    marked = quiz.locator(".quiz-question").evaluate_all(
        "qs => qs.map(q => q.querySelectorAll('input[type=radio][data-correct=true]').length)")
    assert all(count >= 1 for count in marked), f"questions marking no right answer (data-correct): {marked}"
    quiz.locator("input[type=radio][data-correct=true]").evaluate_all(
        "inputs => inputs.forEach(i => i.closest('label').click())")
    assert score.inner_text() == f"{n} of {n} answered, {n} correct"
    page.locator("[data-quiz-reset]").click()
    page.wait_for_function(
        "n => document.querySelector('[data-quiz-score]').textContent === `0 of ${n} answered, 0 correct`", arg=n
    )
    assert_clean(context[1])


def option_orders(page: Any) -> list[list[str]]:
    """Per question, the options' explanations in the order shown."""
    orders: list[list[str]] = page.locator("[data-quiz] ol.quiz-options").evaluate_all(
        "ols => ols.map(ol => Array.from(ol.querySelectorAll('input')).map(i => i.dataset.explanation))"
    )
    return orders


def correct_places(page: Any) -> list[int]:
    places: list[int] = page.locator("[data-quiz] ol.quiz-options").evaluate_all(
        "ols => ols.map(ol => Array.from(ol.querySelectorAll('input')).findIndex(i => i.dataset.correct === 'true'))"
    )
    return places


def test_quiz_options_are_shuffled_per_visit_with_a_replayable_seed(
    page: Any, context: tuple[Any, Watch], server: str
) -> None:
    path = widget_page("data-quiz")
    goto(page, server + path + "?quiz-seed=1")
    assert page.locator("[data-quiz]").get_attribute("data-seed") == "1"
    seed1 = option_orders(page)
    reload(page)
    assert option_orders(page) == seed1, "the same seed gave another order"
    goto(page, server + path + "?quiz-seed=2")
    seed2 = option_orders(page)
    assert [sorted(o) for o in seed2] == [sorted(o) for o in seed1] and seed2 != seed1
    # Without a seed each visit draws its own.
    goto(page, server + path)
    visit1 = (page.locator("[data-quiz]").get_attribute("data-seed"), option_orders(page))
    goto(page, server + path)
    visit2 = (page.locator("[data-quiz]").get_attribute("data-seed"), option_orders(page))
    assert visit1[0] != visit2[0] and visit1[1] != visit2[1]
    # Over a few seeds the right answer moves for every question, and lands in each place about as often.
    places: list[list[int]] = [[] for _ in seed1]
    for seed in range(3, 11):
        goto(page, server + path + f"?quiz-seed={seed}")
        for q, place in enumerate(correct_places(page)):
            places[q].append(place)
    assert all(len(set(p)) >= 2 for p in places), places
    counts = [sum(p.count(i) for p in places) for i in range(4)]
    assert min(counts) >= 0.15 * sum(counts), f"correct answers per place A-D over 8 seeds: {counts}"
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


def test_head_explorer_offers_the_running_sentence_and_names_positions(
    page: Any, context: tuple[Any, Watch], server: str
) -> None:
    path = widget_page("data-head-explorer")
    open_by_navigation(page, server, path)
    root = page.locator("[data-head-explorer]").first
    sentences = root.locator("select[name=sentence] option").all_inner_texts()
    assert any("animal" in s and "tired" in s for s in sentences), sentences
    # The toy model's inputs repeat a stretch of a trained length; the readout tells the copies apart.
    models = root.locator("select[name=model] option").evaluate_all("os => os.map(o => [o.value, o.textContent])")
    toy = next(v for v, label in models if "toy" in label)
    root.locator("select[name=model]").select_option(toy)
    tokens = root.locator(".hx-token")
    T = tokens.count()
    texts = tokens.all_inner_texts()
    assert T >= 32 and texts[: T // 2] == texts[T // 2 :], "the toy input is not a repeated stretch"
    root.locator("select[name=layer]").select_option("1")
    tokens.nth(T - 2).focus()
    readout = root.locator(".hx-readout").inner_text()
    assert f"(pos {T - 2})" in readout and re.search(r"” \(pos \d+\) 0\.\d\d", readout), readout
    assert_clean(context[1])


PRACTICE_HOOKS = ("data-flashcards", "data-quiz", "data-head-explorer")



def use_widgets(page: Any) -> None:
    """Put every widget on the page in its used states: answers shown, marks set, study mode, answers chosen."""
    if page.locator("[data-flashcards]").count():
        page.locator("[data-flashcards] button.flashcard").first.click()
        ids = card_ids(page)
        mark(page, ids[0], "again")
        mark(page, ids[1], "known")
        page.locator("[data-study-again]").click()
    if page.locator("[data-quiz]").count():
        for q in page.locator("[data-quiz] .quiz-question").all()[:3]:
            q.locator("input[type=radio]").first.locator("xpath=ancestor::label[1]").click()
    if page.locator("[data-head-explorer]").count():
        page.locator("[data-head-explorer] .hx-token").nth(2).focus()


# As for the pages (views.py): the laptop width in the light scheme gets every rule; the dark scheme changes only
# colours, so it gets colour contrast; the phone width changes only the layout, so it gets every other rule.
AXE_RULES = {("light", 1280): {}, ("dark", 1280): {"only": ("color-contrast",)},
             ("light", 375): {"skip_rules": PHONE_SKIPS_RULES}}


@pytest.mark.parametrize(("scheme", "width"), list(AXE_RULES))
@pytest.mark.parametrize("hook", PRACTICE_HOOKS)
def test_widgets_in_use_are_axe_clean(browser: Any, server: str, hook: str, scheme: str, width: int) -> None:
    path = widget_page(hook)
    context, watch = open_context(browser, server, viewport={"width": width, "height": 800},
                                  color_scheme=scheme, is_mobile=width < 600)
    try:
        page = context.new_page()
        goto(page, server + path)
        use_widgets(page)
        violations = run_axe(page, **AXE_RULES[scheme, width])
        assert violations == [], f"{path} ({scheme}, {width} px): {json.dumps(violations, indent=1)}"
        assert_clean(watch)
    finally:
        context.close()
