"""Coding exercises with a checker that names the mistake.

Fifteen functions to write, from splitting heads to a FlexAttention mask and learned sinks, each with a statement (the
stub's docstring in :mod:`.stubs`), progressive hints and a lesson section (:mod:`.catalogue`). The
checker (:mod:`.checker`) runs your function on cases chosen to tell the common mistakes apart and compares
it with the package's own code (:mod:`.solutions`); when it is wrong, it runs a catalogue of known-wrong
variants (:mod:`.mistakes`) on the same inputs and names the one your answer matches, with the lesson
that explains it. It needs only ``torch``. The solutions the course's pages show, written in plain torch
for a learner who is stuck, are in :mod:`.shown`.

From a shell::

    python -m lessons_src.lab.exercises start my_attention.py      # the stubs, to fill in
    python -m lessons_src.lab.exercises check split_heads my_attention.py
    python -m lessons_src.lab.exercises check all my_attention.py  # also works on a .ipynb

In a notebook::

    from lessons_src.lab.exercises import check
    check(split_heads)

>>> from lessons_src.lab.exercises import check, solutions
>>> check(solutions.split_heads, quiet=True).passed
True
"""

from __future__ import annotations

from .catalogue import EXERCISES, Exercise
from .checker import LearnerFileError, Result, check, check_file, check_function, load_learner_file
from .mistakes import MISCONCEPTIONS, VARIANTS

__all__ = [
    "EXERCISES",
    "MISCONCEPTIONS",
    "VARIANTS",
    "Exercise",
    "LearnerFileError",
    "Result",
    "check",
    "check_file",
    "check_function",
    "load_learner_file",
]
