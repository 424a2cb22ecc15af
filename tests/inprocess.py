"""Grade trusted test submissions in this process: the judge on values computed right here.

The real grader runs every submission in a sandboxed worker; the test corpus is the project's own
text, so for tests that look at the judge's reasoning (what it claims, and whether the claims hold)
running it here is faster by far and gives the student's values themselves, which the results
never carry. The arguments are handed over read-only, as the worker hands them.
"""
from __future__ import annotations

import copy
import itertools
import sys
import traceback
import types
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from autograder import judge
from autograder.cases import Case
from autograder.grading import Grader
from autograder.results import StepResult
from autograder.runner import Outcome, Run
from autograder.steps import STEPS

FILENAME = "attention_head.py"


@lru_cache(maxsize=None)
def grader(seed: int) -> Grader:
    return Grader(seed)


def _frozen(value):
    value = copy.deepcopy(value)
    if isinstance(value, np.ndarray):
        value.flags.writeable = False
    return value


def _raised(exc: BaseException) -> dict:
    where = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == FILENAME:
            where = f"{FILENAME} line {frame.lineno}, in {frame.name}"
    message = str(exc)
    message = message if len(message) <= 301 else message[:300] + "…"
    return {"type": type(exc).__name__, "message": message, "where": where}


def module(text: str) -> types.ModuleType:
    made = types.ModuleType(f"attention_head_{next(_NUMBERS)}")
    made.__file__ = FILENAME
    sys.modules[made.__name__] = made  # a dataclass in the submission looks its module up there
    try:
        exec(compile(text, FILENAME, "exec"), made.__dict__)
    finally:
        del sys.modules[made.__name__]
    return made


_NUMBERS = itertools.count()


def call(made: types.ModuleType, fn: str, args: tuple) -> Outcome:
    function = getattr(made, fn, None)
    if function is None:
        return Outcome(raised={"type": "MissingName", "message": fn, "where": None})
    if not callable(function):  # as the worker reports a name bound again to a value
        return Outcome(raised={"type": "TypeError", "where": None, "message": (
            f"{fn} is no longer a function but a value of type {type(function).__name__}: after its def, "
            f"something assigned to the name (in a notebook, a later cell such as `{fn} = ...`)")})
    try:
        with np.errstate(all="ignore"):
            return Outcome(value=getattr(made, fn)(*(_frozen(arg) for arg in args)))
    except Exception as exc:  # the student's own exception, as the worker reports it
        return Outcome(raised=_raised(exc))


@dataclass
class Graded:
    steps: dict[str, StepResult]
    outcomes: dict[str, list[Outcome]]
    """Per step, every call's outcome in case order: what the student's code returned or raised."""
    cases: dict[str, list[Case]]


def grade(text: str, seed: int = 7) -> Graded:
    g = grader(seed)
    made = module(text)
    outcomes, flat = [], {}
    for step in STEPS:
        step_outcomes = [call(made, c.fn, c.args) for case in g.cases[step.id] for c in case.calls]
        outcomes.append(step_outcomes)
        flat[step.id] = step_outcomes
    run = Run(outcomes=outcomes, imported=True)
    with np.errstate(all="ignore"):
        steps = judge.grade_run(run, g.cases, g.expected)
    return Graded({result.id: result for result in steps}, flat, g.cases)


FAULTS = ("os.kill", "sys.exit", "exit(", "while True", "2**40", "signal", "subprocess", "threading", "socket")


def runs_here(text: str, status: dict | None = None) -> bool:
    """May this submission run in the test's own process? Not one that is there to kill, stop,
    hang or exhaust its process: only the sandboxed worker can take those."""
    return not any(fault in text for fault in FAULTS) and not set((status or {}).values()) & {"error", "timeout"}
