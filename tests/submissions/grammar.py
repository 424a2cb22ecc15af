"""Mistakes generated from the grammar: one submission per composition of at most two slips.

Each submission is the text of autograder/slips.py followed by the contract functions, each running
its reference pipeline with the composition's slips on the stages it has. So the corpus grows with
every slip added to the grammar. `judge` grades a corpus in one real qkv-grade run and says, step
by step, whether each composition was named where it shows (the step fails):

- exact: the step's codes are the composition's codes on that step's stages;
- equivalent: other slip codes, but a composition with exactly those codes returns the same values
  on every call of the step (the outputs cannot tell the two apart);
- missed: no code, a code that is not a slip's, or slip codes that do not reproduce the values.

    python benchmarks/diagnosis_coverage.py      # prints the shares, step by step
"""
from __future__ import annotations

import inspect
import json
import random
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support import REPO, qkv_grade  # noqa: E402

from autograder import cases, diagnoses, slips  # noqa: E402
from autograder.steps import STEPS  # noqa: E402
from solutions import attention_head as reference  # noqa: E402

Choice = tuple  # ((Slip, variant index), ...)
NOT_SLIPS = {code for code in diagnoses.CODES} - {slip.code for slip in slips.SLIPS}


def singles() -> list[Choice]:
    """Every slip, in every way of writing it that shows on its own."""
    return [((slip, index),) for slip in slips.SLIPS for index in range(len(slip.variants) - slip.only_beside)]


def pairs() -> list[Choice]:
    """Every two slips on different stages of one function, each written its first way."""
    found = []
    for n, first in enumerate(slips.SLIPS):
        for second in slips.SLIPS[n + 1:]:
            if first.knob != second.knob and any({first.knob, second.knob} <= set(knobs)
                                                 for _, knobs in slips.PIPELINES.values()):
                found.append(((first, 0), (second, 0)))
    return found


def sample(choices: list[Choice], count: int, seed: int = 0) -> list[Choice]:
    return random.Random(seed).sample(choices, min(count, len(choices)))


def name(choice: Choice) -> str:
    return "__".join(f"{slip.knob}-{slip.code}-{index}" for slip, index in choice).replace("-", "_")


def on(fn: str, choice: Choice) -> Choice:
    """The part of a composition on `fn`'s stages."""
    return tuple(part for part in choice if part[0].knob in slips.PIPELINES[fn][1])


def source(choice: Choice) -> str:
    """A submission whose every function carries the composition's slips on its own stages."""
    spec = [(slip.code, slip.knob, index) for slip, index in choice]
    lines = [(REPO / "autograder" / "slips.py").read_text(), "",
             f"EXAMPLE_WEIGHTS[:] = {slips.EXAMPLE_WEIGHTS!r}",
             f"_CHOICE = tuple((slip, index) for code, knob, index in {spec!r} for slip in SLIPS",
             "                 if (slip.code, slip.knob) == (code, knob))", "", "",
             "def _on(fn):",
             "    return tuple(part for part in _CHOICE if part[0].knob in PIPELINES[fn][1])", ""]
    for fn in slips.PIPELINES:
        signature = inspect.signature(getattr(reference, fn))
        arguments = ", ".join(signature.parameters)
        lines += ["", f"def {fn}{signature}:", f"    return apply({fn!r}, _on({fn!r}), {arguments})", ""]
    lines += [f'{answer} = "A written answer."' for answer in ("ANSWER_1", "ANSWER_2", "ANSWER_3", "ANSWER_4",
                                                              "ANSWER_5")]
    return "\n".join(lines) + "\n"


@dataclass
class Verdict:
    submission: str
    step: str
    expected: tuple[str, ...]
    got: list[str]
    kind: str  # exact, equivalent, missed


def _same(a, b) -> bool:
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)) and not isinstance(a, np.ndarray):
        return isinstance(b, (tuple, list)) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    scalar = (bool, np.bool_, str)  # a flag, or the name of the exception a call raised
    if isinstance(a, scalar) or isinstance(b, scalar):
        return isinstance(a, scalar) and isinstance(b, scalar) and a == b
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return x.shape == y.shape and bool(np.allclose(x, y, rtol=1e-6, atol=1e-8, equal_nan=True))


def _value(fn: str, choice: Choice, args):
    try:
        with np.errstate(all="ignore"):
            return slips.apply(fn, choice, *args)
    except Exception as error:
        return type(error).__name__


def equivalent(step_id: str, choice: Choice, codes: list[str], seed: int) -> bool:
    """Does some composition with exactly `codes` return what `choice` returns on every call of the step?"""
    calls = [call for case in cases.build(seed)[step_id] for call in case.calls]
    for fn in dict.fromkeys(call.fn for call in calls):
        mine = [_value(fn, on(fn, choice), call.args) for call in calls if call.fn == fn]
        rivals = [rival for depth in (1, 2) for rival_codes, rival, _ in slips.models(fn, depth)
                  if set(rival_codes) == set(codes)] + ([()] if not on(fn, choice) else [])
        if not any(all(_same(_value(fn, rival, call.args), value)
                       for call, value in zip([c for c in calls if c.fn == fn], mine)) for rival in rivals):
            return False
    return True


def judge(choices: list[Choice], seed: int) -> list[Verdict]:
    """Grade one submission per composition in one qkv-grade run; a verdict for every step it shows on."""
    folder = Path(tempfile.mkdtemp(prefix="qkv-grammar-"))
    try:
        by_name = {name(choice): choice for choice in choices}
        (folder / "in").mkdir()
        for submission, choice in by_name.items():
            (folder / "in" / f"{submission}.py").write_text(source(choice))
        done = qkv_grade(str(folder / "in"), "--format", "json", "--seed", str(seed), "--timeout", "2",
                         "--out", str(folder / "out"), timeout=3600)
        assert done.returncode == 0, done.stderr
        results = json.loads(done.stdout)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    verdicts = []
    for result in results:
        submission = result["submission"].removesuffix(".py")
        choice = by_name[submission]
        head_passed = result["steps"][[step.id for step in STEPS].index("head")]["status"] == "passed"
        for step, graded in zip(STEPS, result["steps"]):
            if graded["status"] == "passed":
                continue  # the composition does not show here
            expected = slips.codes_of(tuple(part for fn in step.functions for part in on(fn, choice)))
            got = graded["diagnoses"]
            if step.id == "batch" and head_passed:
                expected = ("batch-axes-mixed",)  # right on one sequence: the contract's name for it
            if set(got) == set(expected):
                kind = "exact"
            elif set(expected) < set(got) and "one of:" in graded["feedback"]:
                kind = "equivalent"  # named among the mistakes the evidence cannot tell apart
            elif got and not NOT_SLIPS & set(got) and equivalent(step.id, choice, got, seed):
                kind = "equivalent"
            else:
                kind = "missed"
            verdicts.append(Verdict(submission, step.id, expected, got, kind))
    return verdicts
