"""Mistakes nobody wrote a model for: how many the grader names, and that it never loses them.

tests/submissions/heldout.json holds ordinary and unusual mistakes, each the reference with one
change in one function, written from the chapter, the contract and the stubs alone, without the
hidden graders' lists of slips in view. They are frozen: a mistake the grader cannot name stays
in the set and counts against the share, so the share measures what the grader does on mistakes
it was not built for.

- Every one loses points, unless the contract accepts what it returns (ACCEPTED, with the reason).
- At least 90% of them are named where they live: the step of the function the change is in (or,
  for a change that shows only on a batch or through a later step, the first step it fails)
  carries the code of a mistake, not only a description of how the values look (LOOKS).
- One mistake costs once: graded for real, each loses points only in the steps that call the
  function it changed; a step built on those keeps its own, its work verified.
- Whatever is said of them is true: they are part of the claims test's corpus
  (tests/test_feedback_claims.py).
"""
from __future__ import annotations

import functools

import pytest

from autograder.steps import STEPS
from inprocess import grade
from submissions.heldout import HELDOUT
from support import grade_json

SEED = 7
NAMED_SHARE = 0.90
# Codes that say how the values look or what the runner saw, not which mistake made them.
LOOKS = {"wrong-shape", "non-finite", "crashed", "hard-coded", "wrong-type", "not-implemented"}
# Changes the contract allows: what they return is a right answer.
ACCEPTED: dict[str, str] = {
    "softmax_epsilon_in_denominator": (
        "1e-9 added to a row total that is at least 1 (the shifted row's largest term is exp(0)) moves "
        "each weight by less than 1e-9 of itself and each row sum by less than 1e-9: inside the grading "
        "tolerance (1e-9 relative) and the contract's own 1e-9 for a row sum, so these are right weights"),
}

STEP_OF = {fn: step.id for step in reversed(STEPS) for fn in step.functions}  # a function's first step


@functools.lru_cache(maxsize=None)
def _graded(name: str):
    return grade(HELDOUT[name].source, SEED)


def _lost(name: str) -> list[str]:
    return [sid for sid, result in _graded(name).steps.items() if result.score < result.max_score]


def _home(name: str) -> str | None:
    """The step where the mistake shows first: its own function's step, else the first failing one."""
    lost = _lost(name)
    own = STEP_OF[HELDOUT[name].function]
    return own if own in lost else (lost[0] if lost else None)


def _named(name: str) -> bool:
    home = _home(name)
    return home is not None and bool(set(_graded(name).steps[home].diagnoses) - LOOKS)


@pytest.mark.parametrize("name", sorted(set(HELDOUT) - set(ACCEPTED)))
def test_every_held_out_mistake_loses_points(name):
    assert _lost(name), f"{name}: {HELDOUT[name].mistake}"


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_what_the_contract_accepts_keeps_every_point(name):
    assert not _lost(name), ACCEPTED[name]


def test_at_least_nine_in_ten_held_out_mistakes_are_named_where_they_live():
    wrong = [name for name in sorted(HELDOUT) if name not in ACCEPTED]
    missed = [name for name in wrong if not _named(name)]
    share = 1 - len(missed) / len(wrong)
    report = "\n".join(f"  {name} ({_home(name)}: {_graded(name).steps[_home(name)].diagnoses if _home(name) else '-'})"
                       f": {HELDOUT[name].mistake}" for name in missed)
    print(f"named {len(wrong) - len(missed)} of {len(wrong)} ({share:.1%}); unnamed:\n{report}")
    assert len(wrong) >= 60
    assert share >= NAMED_SHARE, f"{share:.1%} named; unnamed:\n{report}"


@pytest.fixture(scope="module")
def graded_for_real(tmp_path_factory):
    """The whole set graded in one real `qkv-grade FOLDER` run: the sandboxed worker, and the
    second calls that verify a step built on an earlier failing one."""
    folder = tmp_path_factory.mktemp("heldout")
    (folder / "in").mkdir()
    for name, entry in HELDOUT.items():
        (folder / "in" / f"{name}.py").write_text(entry.source)
    results = grade_json(folder / "in", "--seed", str(SEED), "--out", str(folder / "out"))
    return {result["submission"].removesuffix(".py"): result for result in results}


def test_each_held_out_mistake_costs_points_only_in_the_steps_that_call_its_function(graded_for_real):
    assert len(graded_for_real) == len(HELDOUT)
    spread = []
    for name, entry in sorted(HELDOUT.items()):
        lost = {step["id"] for step in graded_for_real[name]["steps"] if step["score"] < step["max_score"]}
        calling = {step.id for step in STEPS if entry.function in step.functions}
        # The contract asks only the head (and softmax_rows) to take a batch: a slip that shows on
        # batches alone is the batch step's to answer for, wherever its line is.
        if lost - calling and lost != {"batch"}:
            spread.append(f"{name}: lost points in {sorted(lost - calling)} too ({entry.mistake})")
    assert not spread, "\n".join(spread)
