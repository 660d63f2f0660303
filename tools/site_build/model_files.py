"""The live models' weight files: published beside the site, linked from the page that runs them.

Shared by the hooks of the two live-model pages (live_model.py, live_text_model.py). Each exports its model as
``<stem>.bin`` (the tensors) and ``<stem>.json`` (names, shapes, offsets, config), where the stem carries a
hash of both, and writes a placeholder into its widget where the page needs the JSON's address.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

MODEL_DIR = "assets/models"


def link(html: str, page: Any, placeholder: str, stem: Callable[[], str]) -> str:
    """``html`` with ``placeholder`` replaced by the model JSON's URL relative to ``page`` (so the site works under
    any base path); ``stem`` is called only on a page that has the placeholder."""
    if placeholder not in html:
        return html
    from mkdocs.utils import get_relative_url

    return html.replace(placeholder, get_relative_url(f"{MODEL_DIR}/{stem()}.json", page.url))


def write(config: Any, stem: str, data: bytes, meta: bytes) -> None:
    """Write ``<stem>.bin`` and ``<stem>.json`` into the built site's model folder."""
    out = Path(config["site_dir"]) / MODEL_DIR
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.bin").write_bytes(data)
    (out / f"{stem}.json").write_bytes(meta)
