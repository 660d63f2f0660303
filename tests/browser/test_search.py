"""Search finds the lesson: the words a reader types (a model's name, a task) list the lesson that teaches it
among the first three results of the real search index, lessons above the code and exercise pages.

One page load with the real index (the other browser tests serve an empty one: see open_context); each query is
typed into the search box and the results of that query read back, grouped by page as Material shows them.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from browser_support import goto, open_context

# What a reader types, and the page that should answer it.
WANTED = {
    "gpt-oss": "lessons/sinks-and-gates/",  # gpt-oss's learned sink, computed
    "KV cache size": "reference/atlas/",  # the calculator
    "flash attention": "lessons/flash-attention/",
    "GQA": "lessons/gqa-mqa/",
    "Qwen3": "lessons/reading-a-real-model/",  # Qwen3's attention module, line by line
    "sink": "lessons/attention-sinks/",
    "Gemma": "lessons/sliding-windows/",  # Gemma's interleaved sliding-window layers
    "DeepSeek": "lessons/mla/",  # DeepSeek's multi-head latent attention
}
TOP = 3
BELOW_LESSONS = ("reference/code/", "practice/")  # code and exercise pages: never above the lesson


def test_search_lists_the_lesson_a_reader_wants_among_the_first_three(browser: Any, server: str) -> None:
    context, watch = open_context(browser, server, real_search=True, viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        goto(page, server)
        box = page.locator("input.md-search__input")
        box.click()
        missed = {}
        base = urlsplit(server).path
        items = page.locator(".md-search-result__item")
        for query, wanted in WANTED.items():
            box.fill("")  # the last query's results go...
            box.press("End")
            page.wait_for_function("() => !document.querySelector('.md-search-result__item')")
            box.fill(query)  # ...so that whatever is listed next answers this one
            box.press("End")  # a key, as when typing: Material searches again on keyup
            items.first.wait_for(timeout=30_000)
            hrefs = page.locator(".md-search-result__item > a").evaluate_all(
                "as => as.map(a => a.getAttribute('href'))")
            pages = list(dict.fromkeys(urlsplit(h or "").path.removeprefix(base) for h in hrefs))  # by page
            first = pages[: pages.index(wanted)] if wanted in pages else pages
            if wanted not in pages[:TOP] or any(p.startswith(BELOW_LESSONS) for p in first):
                missed[query] = pages[:6]
        assert missed == {}, (f"the wanted page is not among the first {TOP} results, or a code or practice page "
                              f"ranks above it (wanted: {WANTED}); first results: {missed}")
        assert watch.problems() == {}, watch.problems()
    finally:
        context.close()
