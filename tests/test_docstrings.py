"""Every core module's docstring examples run and print what they show, each docstring seeded alike."""

from __future__ import annotations

import doctest
import importlib
import os
from pathlib import Path

import pytest
import torch

import lessons_src

CORE = sorted(p.stem for p in Path(lessons_src.__file__).parent.glob("*.py") if p.stem != "__init__")  # every one


@pytest.mark.parametrize("name", ["lessons_src", *(f"lessons_src.{m}" for m in CORE)])
def test_docstring_examples_run(name: str) -> None:
    if name == "lessons_src.triton_flash":  # its examples run CPU tensors through Triton's interpreter
        pytest.importorskip("triton", reason="the [triton] extra: `make test-triton` runs these examples")
        if os.environ.get("TRITON_INTERPRET") != "1":
            pytest.skip("its examples use CPU tensors: TRITON_INTERPRET=1 (`make test-triton`)")
    module = importlib.import_module(name)
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE)
    tests = [t for t in doctest.DocTestFinder().find(module) if t.examples]
    assert tests, f"{name} has no docstring example"
    report: list[str] = []
    for test in tests:
        torch.manual_seed(0)  # an unseeded example must not pass or fail by luck; each starts from one seed
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
