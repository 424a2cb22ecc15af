"""The bundled sample class shows what it says it shows: each student's one misconception, and no other.

The README's first command grades data/sample-class, and the class report and the benchmark are
built from it, so each sample must keep being diagnosed with exactly the code its docstring names.
"""
from __future__ import annotations

import json

import pytest

from support import REPO, qkv_grade

SAMPLE = REPO / "data" / "sample-class"

EXPECTED = {
    "ada.py": set(),
    "ben.py": {"column-normalized"},
    "cleo.py": {"keys-not-transposed"},
    "dev.py": {"unstable-softmax"},
    "eli.py": {"scaled-by-d_k"},
    "fay.py": {"batch-axes-mixed"},
    "gus.py": {"timeout", "batch-axes-mixed"},  # his loops index rows and columns: a batch of score matrices raises
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("sample-class")
    done = qkv_grade(str(SAMPLE), "--format", "json", "--seed", "1", "--timeout", "0.5", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return {result["submission"]: result for result in json.loads(done.stdout)}


def test_the_class_is_the_seven_samples(results):
    assert sorted(results) == sorted(EXPECTED)
    assert sorted(path.name for path in SAMPLE.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_each_student_shows_exactly_their_misconception(results, student):
    codes = {code for step in results[student]["steps"] for code in step["diagnoses"]}
    assert codes == EXPECTED[student]


def test_ada_scores_full_marks_and_the_others_lose_points(results):
    assert results["ada.py"]["score"] == 100.0
    assert all(result["score"] < 100.0 for name, result in results.items() if name != "ada.py")


def test_the_looping_sample_is_the_one_the_benchmark_leaves_out():
    looping = [path.name for path in SAMPLE.glob("*.py") if "infinite loop" in path.read_text()]
    assert looping == ["gus.py"]


@pytest.mark.parametrize("student", sorted(EXPECTED))
def test_each_sample_says_in_its_first_line_who_wrote_it_and_what_it_shows(student):
    first = (SAMPLE / student).read_text().splitlines()[0]
    name = student.removesuffix(".py").capitalize()
    assert first.startswith(f'"""{name}\'s submission: ') and first.endswith('"""')
    for code in EXPECTED[student]:
        assert f"({code})" in first
