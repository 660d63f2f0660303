"""MkDocs hook: the writer's loop (``make serve``), doing nothing unless ``$SITE_DEV_CACHE`` is set.

First in mkdocs.yml's ``hooks``. ``mkdocs serve`` loads the hooks once and reloads the configuration for each
build. What it reuses and the keys are in :mod:`dev_cache`; here:

* ``on_config``: the inputs fingerprinted; when they changed since the last build, the package's modules are
  dropped from ``sys.modules`` (the blocks import the edited code) and the hooks' ``functools`` caches
  emptied (the live model's export); markdown-exec's python runner is wrapped by the block cache; MkDocs'
  warning that a build is dirty is dropped (``strict: true`` would make it fail every dirty rebuild);
* ``on_files``: when the pages' inputs changed since the last build, every page's HTML is deleted, so a
  dirty build rebuilds every page (the blocks then miss, as their key holds the same fingerprint);
* ``on_pre_page``: which page the next blocks belong to; ``on_page_content``: a line per page that ran code;
* ``on_env``: the theme's templates compiled once per process, not once per build (Jinja's bytecode cache,
  which checks each template's source before it reuses it): 0.7 s of a 3-s rebuild.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import dev_cache  # this folder is on sys.path while MkDocs loads a hook
import jinja2
import jinja2.bccache
import site_links

log = logging.getLogger("mkdocs.hooks.dev_loop")
ENABLED = dev_cache.cache_dir() is not None
_build = {"rebuild_all": False}
_DIRTY_WARNING = "A 'dirty' build is being performed"


class _NoDirtyWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_DIRTY_WARNING)


def on_config(config: Any, **kwargs: Any) -> Any:
    if ENABLED:
        _build["rebuild_all"] = dev_cache.before_build(site_links.git_remote(dev_cache.ROOT), config["hooks"].values())
        dev_cache.install()
        build_log = logging.getLogger("mkdocs.commands.build")
        if not any(isinstance(f, _NoDirtyWarning) for f in build_log.filters):
            build_log.addFilter(_NoDirtyWarning())
    return config


def on_files(files: Any, config: Any, **kwargs: Any) -> Any:
    if _build["rebuild_all"]:
        n = dev_cache.forget_pages(files)
        log.info(f"dev cache: the package, data, tools or configuration changed: rebuilding all {n} pages")
    return files


def on_pre_page(page: Any, **kwargs: Any) -> Any:
    if ENABLED:
        dev_cache.start_page(page.file.src_uri)
        dev_cache.STATE.update(started=time.monotonic(), runs=0, hits=0)
    return page


def on_page_content(html: str, page: Any, **kwargs: Any) -> str:
    state = dev_cache.STATE
    if ENABLED and state["runs"]:
        log.info(f"dev cache: {page.file.src_uri}: ran {state['runs']} blocks, reused {state['hits']} "
                 f"({time.monotonic() - state['started']:.1f} s)")
    return html


class _MemoryBytecodeCache(jinja2.BytecodeCache):
    def __init__(self) -> None:
        self.buckets: dict[str, bytes] = {}

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        if (code := self.buckets.get(bucket.key)) is not None:
            bucket.bytecode_from_string(code)  # Jinja drops it when the template's checksum differs

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        self.buckets[bucket.key] = bucket.bytecode_to_string()


_TEMPLATES = _MemoryBytecodeCache()


def on_env(env: Any, **kwargs: Any) -> Any:
    if ENABLED:
        env.bytecode_cache = _TEMPLATES
    return env
