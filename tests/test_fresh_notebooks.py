"""Thirty notebooks handed in as students hand them in (scratch cells, outputs, helpers, a name
rebound by a later cell, a global read inside a function, a cell that stops before a def), written
from the chapter, the released notebook and the students' part of the README alone
(tests/submissions/fresh17/, with what each one's author meant in mistakes.json; frozen: never
edited to suit the grader). Graded as a folder, each gets the verdict its code earns, a mistake of a
function is named where its numbers are wrong, and a notebook's own slip is told in its words."""
from __future__ import annotations

import json

import pytest

from support import REPO, grade_json

FOLDER = REPO / "tests" / "submissions" / "fresh17"
MEANT = {entry["name"]: entry["mistake"] for entry in json.loads((FOLDER / "mistakes.json").read_text())}
# Correct as the graders run them: the four written correct, and a `%%time` cell around a def,
# which IPython runs in the notebook's own namespace, as the graders do.
CORRECT = {"n24-scale-cell-time-magic", "n27-ok-namedtuple-einsum", "n28-ok-loops-recursive",
           "n29-ok-logaddexp-lists", "n30-ok-helper-cells"}
# A numeric slip inside a function: the first step it fails names a mistake, not only how it failed.
NUMERIC = {f"n{n:02d}" for n in range(1, 16)}
PROBES = {"crashed", "hard-coded", "wrong-shape", "wrong-type", "non-finite", "not-implemented", "slightly-off"}
# A notebook's own slip: what its feedback says of it.
TOLD = {
    "n16": ("scores", "binds `scores` in more than one cell"),
    "n17": ("softmax", "binds `softmax_rows` in more than one cell"),
    "n18": ("qkv", "reads `X`, defined outside the function"),
    "n19": ("mix", "binds `mix` in more than one cell"),
    "n20": ("ex1_zero_query", "the rest of that cell would have defined `zero_query_mixture`"),
    "n21": ("ex3_value_shift", "the rest of that cell would have defined `output_change`"),
    "n22": ("attention", "which the graders never pass"),
    "n23": ("ex2_row_normalization", "NameError: name 'tol' is not defined"),
    "n25": ("ex5_intervention", "imports a module the graders' Python does not have"),
    "n26": ("head", "reads `W_K` and `W_Q`, defined outside the function"),
}


@pytest.fixture(scope="module")
def graded():
    results = grade_json(FOLDER, "--seed", "11")
    return {result["submission"].removesuffix(".ipynb"): result for result in results}


def test_every_notebook_is_graded_and_only_the_correct_ones_get_full_marks(graded):
    assert set(graded) == set(MEANT)
    assert {name for name, result in graded.items() if result["score"] == 100.0} == CORRECT


def test_a_numeric_slip_is_named_on_the_first_step_it_fails(graded):
    unnamed = {}
    for name, result in graded.items():
        if name[:3] in NUMERIC:
            first = next(step for step in result["steps"] if step["status"] != "passed")
            if not set(first["diagnoses"]) - PROBES:
                unnamed[name] = (first["id"], first["diagnoses"], MEANT[name])
    assert not unnamed, unnamed


@pytest.mark.parametrize("prefix", sorted(TOLD))
def test_a_notebook_s_own_slip_is_told_in_its_words(graded, prefix):
    [name] = [name for name in graded if name.startswith(prefix)]
    step_id, words = TOLD[prefix]
    step = next(step for step in graded[name]["steps"] if step["id"] == step_id)
    assert step["status"] != "passed" and words in step["feedback"], (MEANT[name], step["feedback"])
