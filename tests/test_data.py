"""The chapter's expected values in data/part-iv: reproducible, well formed, and right.

"Right" is checked three ways, none of them through derive.py's own code: against the figures the
chapter prints, against a high-precision recomputation that follows the plain definitions (matrix
products and exp(S_ij) / sum_j exp(S_ij)), and against the reference solution.
"""
from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import mpmath
import numpy as np
import pytest
from jsonschema import Draft202012Validator

ROOT = Path(__file__).resolve().parents[1]
PART_IV = ROOT / "data" / "part-iv"
DATA = PART_IV / "attention.json"
SCHEMA = PART_IV / "attention.schema.json"
DERIVE = PART_IV / "derive.py"
CHAPTER = PART_IV / "chapter-table-15-1.json"

# A float64 rounding of a value near 3.5 is off by at most 2.2e-16, so this leaves room only for
# rounding, never for a wrong formula.
CLOSE = 1e-15


@pytest.fixture(scope="module")
def data():
    return json.loads(DATA.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def validator():
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@pytest.fixture(scope="module")
def chapter():
    return json.loads(CHAPTER.read_text(encoding="utf-8"))


def run_derive(*args):
    return subprocess.run([sys.executable, str(DERIVE), *args],
                          capture_output=True, text=True, timeout=120)


# --- reproducible -------------------------------------------------------------------------------

def test_rerunning_the_derivation_reproduces_the_file_byte_for_byte(tmp_path):
    fresh = tmp_path / "attention.json"
    result = run_derive("--output", str(fresh))
    assert result.returncode == 0, result.stderr
    assert fresh.read_bytes() == DATA.read_bytes()


def test_derivation_check_mode_accepts_the_committed_file():
    result = run_derive("--check")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("attention.json is up to date.")


def test_derivation_check_mode_rejects_a_file_that_differs(tmp_path):
    stale = tmp_path / "attention.json"
    stale.write_text(DATA.read_text(encoding="utf-8").replace("0.4011120926797859", "0.401112", 1),
                     encoding="utf-8")
    result = run_derive("--check", "--output", str(stale))
    assert result.returncode != 0
    assert "out of date" in result.stderr


def test_derivation_runs_without_numpy_or_the_reference_solution(tmp_path):
    fresh = tmp_path / "attention.json"
    # Any attempt to import numpy or this project's own code fails, so the file must come out the
    # same from the integer sums and closed forms alone.
    blocked_run = f"""
import runpy, sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {{"numpy", "solutions", "autograder"}}:
            raise ImportError("not allowed in the derivation: " + name)
sys.meta_path.insert(0, Refuse())
sys.argv = ["derive.py", "--output", {str(fresh)!r}]
runpy.run_path({str(DERIVE)!r}, run_name="__main__")
"""
    result = subprocess.run([sys.executable, "-c", blocked_run],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert fresh.read_bytes() == DATA.read_bytes()


# --- well formed --------------------------------------------------------------------------------

def test_the_data_file_validates_against_its_schema(data, validator):
    errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(data)]
    assert errors == []


def test_the_data_file_keeps_the_agreed_top_level_layout(data):
    assert list(data) == ["$schema", "chapter", "tolerance", "inputs", "exact", "closed_forms",
                          "values", "exercises"]
    assert data["$schema"] == "attention.schema.json"
    assert data["tolerance"] == {"absolute": 1e-12}


def _set(path, value):
    def corrupt(doc):
        *parents, last = path
        for key in parents:
            doc = doc[key]
        doc[last] = value
    return corrupt


def _delete(path):
    def corrupt(doc):
        *parents, last = path
        for key in parents:
            doc = doc[key]
        del doc[last]
    return corrupt


def _append_row(path):
    def corrupt(doc):
        for key in path:
            doc = doc[key]
        doc.append(list(doc[-1]))
    return corrupt


CORRUPTIONS = {
    "a string in a weight matrix": _set(["values", "A", 0, 1], "0.197776"),
    "a fraction in an integer matrix": _set(["exact", "D", 2, 2], 3.5),
    "a missing top-level section": _delete(["closed_forms"]),
    "a missing exercise key": _delete(["exercises", "ex4_shapes", "divisor"]),
    "an extra output row": _append_row(["values", "O"]),
    "a short query": _set(["exercises", "ex1_zero_query", "query"], [0]),
    "a negative weight": _set(["values", "A", 2, 0], -0.1),
    "an unknown key": _set(["values", "B"], [[0.0]]),
    "another tolerance": _set(["tolerance", "absolute"], 1e-6),
    "a row index past the end": _set(["exercises", "ex3_value_shift", "rows"], [3]),
}


@pytest.mark.parametrize("corruption", list(CORRUPTIONS), ids=list(CORRUPTIONS))
def test_a_corrupted_copy_fails_validation(data, validator, corruption):
    broken = copy.deepcopy(data)
    CORRUPTIONS[corruption](broken)
    assert not validator.is_valid(broken)


# --- right by the chapter's printed figures -----------------------------------------------------

def rounded(matrix, places):
    return [[round(x, places) for x in row] for row in matrix]


def test_weights_rounded_to_six_places_are_table_15_1(data, chapter):
    assert rounded(data["values"]["A"], chapter["decimals"]) == chapter["A"]


def test_outputs_rounded_to_six_places_are_the_chapters_output_matrix(data, chapter):
    assert rounded(data["values"]["O"], chapter["decimals"]) == chapter["O"]


def test_scaled_scores_and_r_round_to_the_chapters_constants(data, chapter):
    s, a = data["values"]["S"], data["values"]["A"]
    places = chapter["decimals"]
    assert round(s[0][0], places) == chapter["s"]
    assert round(s[2][2], places) == chapter["last_scaled_score"]
    # The first row's weights are [r, 1, r] / (2r + 1): their ratio is r, the middle one 1/(2r+1).
    assert round(a[0][0] / a[0][1], places) == chapter["r"]
    assert round(1 / a[0][1], places) == chapter["first_row_total"]


def test_exercise_answers_agree_with_the_reference_answers(data, chapter):
    ex = data["exercises"]
    published = chapter["exercise_1"]
    assert ex["ex1_zero_query"]["weights"] == [float(Fraction(w)) for w in published["weights"]]
    assert ex["ex1_zero_query"]["output"] == [float(Fraction(o)) for o in published["output"]]

    ex3 = chapter["exercise_3"]
    first = ex["ex3_value_shift"]["whole_shift_output"][0]
    assert first == pytest.approx(ex3["first_output"], abs=CLOSE)
    assert data["values"]["A"][0][0] == pytest.approx(ex3["row1_weight"], abs=CLOSE)
    shift = ex["ex3_value_shift"]["shift"]
    only_row_1 = [o + c * ex3["row1_weight"] for o, c in zip(data["values"]["O"][0], shift)]
    assert ex["ex3_value_shift"]["row1_shift_output"][0] == pytest.approx(only_row_1, abs=CLOSE)

    ex4 = chapter["exercise_4"]
    facts = ex["ex4_shapes"]
    assert (facts["divisor"], facts["score_shape"], facts["output_shape"]) == (
        ex4["divisor"], ex4["score_shape"], ex4["output_shape"])


# --- right by a high-precision recomputation from the definitions -------------------------------

@pytest.fixture(scope="module")
def high_precision(data):
    """Every expected quantity, from matrix products and the softmax definition at 60 digits."""
    with mpmath.workdps(60):
        x, w_q, w_k, w_v = (mpmath.matrix(data["inputs"][n]) for n in ("X", "W_Q", "W_K", "W_V"))
        q, k, v = x * w_q, x * w_k, x * w_v
        d = q * k.T
        d_k = q.cols
        s = d / mpmath.sqrt(d_k)

        def softmax(row):
            e = [mpmath.exp(z) for z in row]
            total = mpmath.fsum(e)
            return [z / total for z in e]

        a = mpmath.matrix([softmax([s[i, j] for j in range(s.cols)]) for i in range(s.rows)])
        o = a * v

        zero = mpmath.matrix([[0] * d_k])
        ex1_weights = mpmath.matrix([softmax((zero * k.T / mpmath.sqrt(d_k)).tolist()[0])])
        ex1_output = ex1_weights * v

        ex3 = data["exercises"]["ex3_value_shift"]
        shift = mpmath.matrix([ex3["shift"]])
        every_row = v + mpmath.matrix([ex3["shift"]] * v.rows)
        some_rows = v.copy()
        for i in ex3["rows"]:
            some_rows[i, :] = some_rows[i, :] + shift
        ex4 = data["exercises"]["ex4_shapes"]
        return {
            ("exact", "Q"): q, ("exact", "K"): k, ("exact", "V"): v, ("exact", "D"): d,
            ("values", "S"): s, ("values", "A"): a, ("values", "O"): o,
            ("ex1_zero_query", "weights"): ex1_weights,
            ("ex1_zero_query", "output"): ex1_output,
            ("ex3_value_shift", "whole_shift_output"): a * every_row,
            ("ex3_value_shift", "row1_shift_output"): a * some_rows,
            ("ex4_shapes", "divisor"): mpmath.matrix([[mpmath.sqrt(ex4["d_k"])]]),
        }


def listed(data, section, name):
    values = data[section] if section in ("exact", "values") else data["exercises"][section]
    value = values[name]
    if not isinstance(value, list):
        return [[value]]
    return value if isinstance(value[0], list) else [value]


def test_integer_results_equal_the_high_precision_products_exactly(data, high_precision):
    for name in ("Q", "K", "V", "D"):
        exact = high_precision["exact", name]
        assert listed(data, "exact", name) == [[int(z) for z in row] for row in exact.tolist()]
        assert all(z == int(z) for row in exact.tolist() for z in row)


def test_every_float_is_within_1e_15_of_the_high_precision_value(data, high_precision):
    far = []
    for (section, name), exact in high_precision.items():
        if section == "exact":
            continue
        expected = listed(data, section, name)
        assert [len(row) for row in expected] == [exact.cols] * exact.rows, name
        for i, row in enumerate(expected):
            for j, value in enumerate(row):
                if abs(mpmath.mpf(value) - exact[i, j]) > CLOSE:
                    far.append(f"{section}.{name}[{i}][{j}]")
    assert far == []


def test_the_written_closed_forms_evaluate_to_the_listed_values(data):
    forms = data["closed_forms"]

    def evaluate(text, **names):
        python = re.sub(r"(\d)([a-z(])", r"\1*\2", text.replace("^", "**"))
        return eval(python, {"__builtins__": {}, "sqrt": mpmath.sqrt, "exp": mpmath.exp}, names)

    with mpmath.workdps(40):
        s = evaluate(forms["s"])
        r = evaluate(forms["r"])
        assert abs(r - mpmath.exp(s)) < 1e-35
        for i, row in enumerate(forms["S"]):
            for j, text in enumerate(row):
                assert abs(evaluate(text, s=s) - data["values"]["S"][i][j]) <= CLOSE
        for i, text in enumerate(forms["A"]):
            numerators, denominator = re.fullmatch(r"\[(.*)\]/\((.*)\)", text).groups()
            total = evaluate(denominator, r=r)
            for j, n in enumerate(numerators.split(",")):
                assert abs(evaluate(n, r=r) / total - data["values"]["A"][i][j]) <= CLOSE
        for i, row in enumerate(forms["O"]):
            for j, text in enumerate(row):
                assert abs(evaluate(text, r=r) - data["values"]["O"][i][j]) <= CLOSE


# --- right by the reference solution ------------------------------------------------------------

def test_the_reference_solution_matches_the_file(data):
    from solutions import attention_head as head

    inputs = [np.array(data["inputs"][n], dtype=np.float64) for n in ("X", "W_Q", "W_K", "W_V")]
    q, k, v = head.project_qkv(*inputs)
    d = head.scores(q, k)
    s = head.scale(d, q.shape[-1])
    o, a = head.self_attention_head(*inputs)
    for name, actual in {"Q": q, "K": k, "V": v, "D": d}.items():
        np.testing.assert_array_equal(actual, data["exact"][name], err_msg=name)
    for name, actual in {"S": s, "A": a, "O": o}.items():
        np.testing.assert_allclose(actual, data["values"][name], rtol=0, atol=CLOSE, err_msg=name)

    ex = data["exercises"]
    weights, output = head.zero_query_mixture(k, v)
    np.testing.assert_allclose(weights, ex["ex1_zero_query"]["weights"], rtol=0, atol=CLOSE)
    np.testing.assert_allclose(output, ex["ex1_zero_query"]["output"], rtol=0, atol=CLOSE)
    ex3 = ex["ex3_value_shift"]
    shift = np.array(ex3["shift"], dtype=np.float64)
    np.testing.assert_allclose(head.shifted_output(a, v, shift), ex3["whole_shift_output"],
                               rtol=0, atol=CLOSE)
    np.testing.assert_allclose(head.shifted_output(a, v, shift, rows=ex3["rows"]),
                               ex3["row1_shift_output"], rtol=0, atol=CLOSE)
    ex4 = ex["ex4_shapes"]
    facts = head.head_facts(ex4["t"], ex4["d_k"], ex4["d_v"])
    assert facts["divisor"] == ex4["divisor"]
    assert list(facts["score_shape"]) == ex4["score_shape"]
    assert list(facts["output_shape"]) == ex4["output_shape"]
    assert facts["softmax_axis"] == ex4["softmax_axis"]


def test_an_install_that_is_not_editable_ships_every_data_file_the_grader_reads(tmp_path):
    """`pip install .` (not -e) put the package in site-packages without data/: every command
    stopped on a FileNotFoundError. The grader reads its data in autograder/_data (a link to data/
    here), which the wheel carries as package data; this builds the wheel and looks for each file."""
    import zipfile

    import shutil

    from autograder import atlas, cases, derived, numpy_check, release, results

    root = Path(cases.__file__).resolve().parents[1]
    read = [atlas.ATLAS, cases.DATA, derived.SCREENS, results.SCHEMA, numpy_check.DATA, numpy_check.SCHEMA,
            release.DATA, release.REFERENCE, release.LESSONS]
    assert all(path.is_file() for path in read), read
    # built from a copy, so that the build's own folders never land in the project
    copy = tmp_path / "project"
    copy.mkdir()
    for part in ("pyproject.toml", "README.md", "autograder", "solutions", "data"):
        if (root / part).is_dir():
            shutil.copytree(root / part, copy / part, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(root / part, copy / part)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path),
                           str(copy)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    for path in read:
        inside = path.relative_to(root).as_posix()
        assert inside in names, f"{inside} is read by the grader and missing from the wheel"
