"""MkDocs hook: reproducible notebooks (MkDocs-specific: it patches the executor mkdocs-jupyter creates).

A kernel's printed output reaches nbclient in chunks whose boundaries depend on timing, and each chunk became a
separate output block, so two builds of the same notebook differed. Consecutive stream outputs are merged
(nbclient's ``coalesce_streams``), as a notebook shows them.
"""

from __future__ import annotations

from typing import Any


def on_config(config: Any, **kwargs: Any) -> Any:
    # mkdocs-jupyter replaces nbconvert's whole ExecutePreprocessor configuration (a config file cannot
    # reach it), so every ExecutePreprocessor is told to coalesce streams as it is created.
    from nbconvert.preprocessors import ExecutePreprocessor

    if not getattr(ExecutePreprocessor, "_coalesces_streams", False):
        original_init = ExecutePreprocessor.__init__

        def init(self: Any, *args: Any, **kw: Any) -> None:
            original_init(self, *args, **kw)
            self.coalesce_streams = True

        ExecutePreprocessor.__init__ = init  # type: ignore[method-assign]
        ExecutePreprocessor._coalesces_streams = True  # type: ignore[attr-defined]
    return config
