"""One mistake costs once and is told once: the error carried forward, verified, never assumed.

A step whose own work is right keeps its points when its only wrong values are what the
reference gives with the earlier step's diagnosed mistake in place of that step. Each submission
here is the sample (a softmax normalized over columns) with, at most, one more change to
`attention`; all are graded in one real `qkv-grade FOLDER` run with and one without
--no-carry-forward. Then every single slip of the corpus (tests/submissions and the grammar in
autograder/slips.py) must cost points in one step only.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import jsonschema
import pytest

from autograder import slips
from autograder.steps import BY_ID, STEP_IDS
from support import REPO, qkv_grade, reference_source

# Under pytest-xdist, one worker runs the module: its submissions are graded once each way.
pytestmark = pytest.mark.xdist_group("carry-forward")

SEED = 7
SAMPLE = (REPO / "data" / "sample-submission" / "attention_head.py").read_text()
SCHEMA = jsonschema.Draft202012Validator(json.loads((REPO / "data" / "results.schema.json").read_text()))
ATTENTION_A = "    a = softmax_rows(scale(scores(q, k), d_k))  # [T, T]\n"
ATTENTION_O = "    o = mix(a, v)  # [T, d_v]\n"
CHAPTER = json.loads((REPO / "data" / "part-iv" / "attention.json").read_text())["values"]
DOWNSTREAM = ("attention", "head", "batch", "ex1_zero_query", "ex5_intervention")


def _changed(old: str, new: str) -> str:
    assert SAMPLE.count(old) == 1
    return SAMPLE.replace(old, new)


SUBMISSIONS = {
    "sample": SAMPLE,
    "correct": reference_source(),
    # A second, independent mistake: attention forgets the divisor √d_k.
    "unscaled_attention": _changed(ATTENTION_A, "    a = softmax_rows(scores(q, k))  # [T, T]\n"),
    # Attention wrong on its own, in a way no slip describes: a constant added to the output.
    "attention_off_by_a_constant": _changed(ATTENTION_O, "    o = mix(a, v) + 1e-3  # [T, d_v]\n"),
    # Attention copied from the chapter's example: right there, wrong everywhere else.
    "attention_hard_coded": _changed(
        ATTENTION_O + "    return o, a\n",
        f"    return np.array({CHAPTER['O']!r}), np.array({CHAPTER['A']!r})\n"),
    # Attention guessing uniform weights: what a column-normalized softmax never gives.
    "attention_guesses_uniform": _changed(
        ATTENTION_A, "    a = np.full((q.shape[-2], k.shape[-2]), 1.0 / k.shape[-2])  # [T, T]\n"),
}


def _grade(*extra: str) -> dict[str, dict]:
    folder = Path(tempfile.mkdtemp(prefix="qkv-carry-"))
    try:
        for name, source in SUBMISSIONS.items():
            (folder / "in").mkdir(exist_ok=True)
            (folder / "in" / f"{name}.py").write_text(source)
        done = qkv_grade(str(folder / "in"), "--format", "json", "--seed", str(SEED), "--out", str(folder / "out"),
                         *extra, timeout=600)
        assert done.returncode == 0, done.stderr
        documents = json.loads(done.stdout)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    SCHEMA.validate(documents)
    return {document["submission"].removesuffix(".py"): document for document in documents}


@pytest.fixture(scope="module")
def carried():
    return _grade()


@pytest.fixture(scope="module")
def on_its_own():
    return _grade("--no-carry-forward")


def _steps(result: dict) -> dict[str, dict]:
    return {step["id"]: step for step in result["steps"]}


def _lost(result: dict) -> dict[str, float]:
    return {step["id"]: round(step["max_score"] - step["score"], 2) for step in result["steps"]
            if step["score"] < step["max_score"]}


def test_the_sample_loses_points_only_in_softmax(carried):
    sample = carried["sample"]
    steps = _steps(sample)
    assert list(_lost(sample)) == ["softmax"]
    # softmax passes 1 case of 10: it keeps 1.0 of its 10 points, every other step all of its own
    assert steps["softmax"]["score"] == 1.0 and sample["score"] == 91.0
    for sid in DOWNSTREAM:
        assert steps[sid]["carried_from"] == "softmax", steps[sid]["feedback"]
        assert steps[sid]["diagnoses"] == ["column-normalized"]
    assert all(step["carried_from"] is None for sid, step in steps.items() if sid not in DOWNSTREAM)


def test_without_carry_forward_the_sample_scores_as_each_step_alone(on_its_own):
    sample = on_its_own["sample"]
    assert sample["score"] == 57.66
    assert set(_lost(sample)) == {"softmax"} | set(DOWNSTREAM)
    assert all(step["carried_from"] is None for step in sample["steps"])


def test_the_mistake_is_told_once_and_each_step_built_on_it_says_so_in_a_few_lines(carried):
    steps = _steps(carried["sample"])
    assert "mismatched elements" in steps["softmax"]["feedback"]
    assert "Where to look" in steps["softmax"]["feedback"]
    for sid in DOWNSTREAM:
        text = steps[sid]["feedback"]
        assert len(text.splitlines()) <= 3, text
        assert "`softmax`" in text and "column-normalized" in text and "checks out" in text
        assert "mismatched elements" not in text and "Where to look" not in text


def test_a_second_mistake_in_attention_still_costs_attention_its_points(carried):
    result = carried["unscaled_attention"]
    steps = _steps(result)
    assert set(_lost(result)) == {"softmax", "attention"}
    assert steps["attention"]["carried_from"] is None
    assert "no-scaling" in steps["attention"]["diagnoses"]
    assert "`softmax`" in steps["attention"]["feedback"]  # the earlier step is still named first
    # the head, the batch and exercise 5 are right on top of both mistakes
    for sid in ("head", "batch", "ex5_intervention"):
        assert steps[sid]["carried_from"] == "softmax", steps[sid]["feedback"]
    assert steps["ex1_zero_query"]["carried_from"] == "softmax"


@pytest.mark.parametrize("name", ["attention_off_by_a_constant", "attention_hard_coded", "attention_guesses_uniform"])
def test_a_step_wrong_in_a_way_the_earlier_mistake_does_not_explain_gets_no_carried_credit(carried, on_its_own, name):
    steps = _steps(carried[name])
    assert steps["attention"]["carried_from"] is None
    assert steps["attention"]["score"] == _steps(on_its_own[name])["attention"]["score"] < BY_ID["attention"].points
    # nothing built on the wrong attention is carried either
    for sid in ("head", "batch", "ex5_intervention"):
        assert steps[sid]["score"] < steps[sid]["max_score"] and steps[sid]["carried_from"] is None


def test_carried_credit_never_raises_a_score_above_correct_code_or_its_own_grading(carried, on_its_own):
    assert carried["correct"]["score"] == on_its_own["correct"]["score"] == 100.0
    for name, result in carried.items():
        assert on_its_own[name]["score"] <= result["score"] <= carried["correct"]["score"]
        for step, alone in zip(result["steps"], on_its_own[name]["steps"]):
            assert step["score"] <= step["max_score"]
            assert step["score"] == (step["max_score"] if step["carried_from"] else alone["score"])


def test_the_text_view_and_gradescope_follow_the_carried_scores(tmp_path):
    path = tmp_path / "attention_head.py"
    path.write_text(SAMPLE)
    text = qkv_grade(str(path), "--seed", str(SEED)).stdout
    assert ": 91 / 100" in text and "carried from softmax" in text
    gradescope = json.loads(qkv_grade(str(path), "--seed", str(SEED), "--format", "gradescope").stdout)
    assert gradescope["score"] == 91.0
    tests = {test["name"].split(":")[0]: test for test in gradescope["tests"]}
    assert all(tests[sid]["status"] == "passed" and tests[sid]["score"] == tests[sid]["max_score"]
               for sid in DOWNSTREAM)
    assert tests["softmax"]["status"] == "failed"


# ------------------------------------------------------------------ the whole corpus ------------

def _home(lost: dict[str, float]) -> str:
    assert len(lost) == 1, lost
    (sid, points), = lost.items()
    assert points <= BY_ID[sid].points
    return sid


# Mistakes of the corpus that are not one slip in one place, or whose numbers no model reproduces
# to the grading tolerance, so nothing can be verified and every step is graded on its own.
NOT_A_SINGLE_VERIFIABLE_SLIP = {
    "stub": "nothing is written",
    "scale_d_k_and_columns": "two slips, in scale and softmax",
    "softmax_no_keepdims_mix_weights_transposed": "two slips, in softmax and mix",
    "softmax_unused_shift_raw_scores_normalized": "two slips, the second shows only on a batch",
    "batch_softmax_axis_1": "right on the softmax step's 2-D cases; wrong on a batch and on one query",
    "float32_mix": "float32 arithmetic inside the function: no model gives its numbers to 1e-9",
    "float32_projection": "float32 arithmetic inside the function",
    "float32_softmax": "float32 arithmetic inside the function",
    "forgot_return": "returns None: no model of a value",
    "hard_coded_softmax": "hard-coded: no model of its values",
    "softmax_total_minus_one": "non-finite values no model gives",
    "scores_not_written": "not implemented",
}


def test_every_single_slip_of_the_submissions_costs_points_in_one_step_only():
    from submissions.variants import everything, graded

    results = graded(SEED)
    checked = 0
    for name, submission in everything().items():
        if not submission.expected or name in NOT_A_SINGLE_VERIFIABLE_SLIP:
            continue
        home = _home(_lost(results[name]))
        assert home in submission.expected, (name, home)
        assert all(home in BY_ID[sid].uses or home in _uses(sid) or sid == home for sid in submission.expected), name
        checked += 1
    assert checked >= 80


def _uses(sid: str) -> set[str]:
    found = set()
    for used in BY_ID[sid].uses:
        found |= {used} | _uses(used)
    return found


def test_every_single_slip_of_the_grammar_costs_points_in_one_step_only():
    """The grammar writes a `result` slip into every function, which is a mistake in each: those
    are left out. Every other slip, in every way of writing it, lives in one step."""
    from submissions import grammar

    choices = [choice for choice in grammar.singles() if choice[0][0].knob != "result"]
    assert len(choices) >= 100 and {slip.knob for slip in slips.SLIPS} - {"result"} == \
        {choice[0][0].knob for choice in choices}
    folder = Path(tempfile.mkdtemp(prefix="qkv-carry-grammar-"))
    try:
        (folder / "in").mkdir()
        for choice in choices:
            (folder / "in" / f"{grammar.name(choice)}.py").write_text(grammar.source(choice))
        done = qkv_grade(str(folder / "in"), "--format", "json", "--seed", str(SEED), "--out", str(folder / "out"),
                         timeout=3600)
        assert done.returncode == 0, done.stderr
        results = json.loads(done.stdout)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert len(results) == len(choices)
    for result in results:
        home = _home(_lost(result))
        assert home in STEP_IDS, result["submission"]
