"""qkv-check, run as a real command: it passes on the committed data, writes its trace, names what
differs in a tampered copy, and stops with one line when the data file is unusable."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# Under pytest-xdist, one worker runs the module: qkv-check runs once.
pytestmark = pytest.mark.xdist_group("numpy-check")

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "part-iv" / "attention.json"
COMPARED = ["Q", "K", "V", "D", "S", "A", "O", "ex1 weights", "ex1 output", "ex3 whole shift",
            "ex3 row-1 shift", "ex4 divisor", "ex4 score shape", "ex4 output shape",
            "ex4 softmax axis"]


def qkv_check(*args):
    return subprocess.run([sys.executable, "-m", "autograder.numpy_check", *map(str, args)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def differing(stdout):
    """The names on the summary line `differs: A, O; trace written to ...`."""
    summary = stdout.strip().splitlines()[-1]
    assert summary.startswith("differs: "), stdout
    return summary.removeprefix("differs: ").split(";")[0].split(", ")


@pytest.fixture
def tampered(tmp_path):
    """Write a copy of the data with one change, and return its path."""
    def write(change):
        data = json.loads(DATA.read_text(encoding="utf-8"))
        change(data)
        path = tmp_path / "attention.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        return path
    return write


@pytest.fixture(scope="module")
def passing_run(tmp_path_factory):
    trace = tmp_path_factory.mktemp("check") / "nested" / "numpy-run.json"
    result = qkv_check("--trace", trace)
    return result, trace


def test_the_check_passes_on_the_committed_data(passing_run):
    result, _ = passing_run
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("all 15 comparisons agree")


def test_the_table_lists_every_comparison(passing_run):
    result, _ = passing_run
    first_cells = [line.split("  ")[0] for line in result.stdout.splitlines()]
    assert all(name in first_cells for name in COMPARED)


def test_the_trace_records_the_environment_and_every_difference(passing_run):
    _, trace_path = passing_run
    trace = json.loads(trace_path.read_text(encoding="utf-8"))
    assert {"numpy", "python", "platform", "machine", "tolerance", "arrays"} <= set(trace)
    assert trace["numpy"] == np.__version__
    assert trace["tolerance"] == {"absolute": 1e-12}
    assert list(trace["arrays"]) == COMPARED
    for name, record in trace["arrays"].items():
        assert {"max_abs_difference", "exact", "ok"} <= set(record), name
        assert record["ok"] is True, name
        assert 0.0 <= record["max_abs_difference"] <= 1e-12, name
        assert record["exact"] == (record["max_abs_difference"] == 0.0), name
    for name in ("Q", "K", "V", "D"):
        assert trace["arrays"][name]["exact"] is True, name


def test_a_tampered_weight_fails_the_check_and_is_named(tampered, tmp_path):
    def nudge(data):
        data["values"]["A"][1][2] += 1e-9
    trace_path = tmp_path / "trace.json"
    result = qkv_check("--data", tampered(nudge), "--trace", trace_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert differing(result.stdout) == ["A"]
    trace = json.loads(trace_path.read_text(encoding="utf-8"))
    assert trace["arrays"]["A"]["ok"] is False
    assert trace["arrays"]["A"]["max_abs_difference"] == pytest.approx(1e-9, rel=1e-3)


def test_an_integer_result_must_match_exactly(tampered, tmp_path):
    def miscount(data):
        data["exact"]["D"][2][2] = 4
    result = qkv_check("--data", tampered(miscount), "--trace", tmp_path / "trace.json")
    assert result.returncode == 1, result.stdout + result.stderr
    assert differing(result.stdout) == ["D"]


def test_a_difference_within_the_tolerance_still_passes(tampered, tmp_path):
    def nudge(data):
        data["values"]["O"][0][0] += 1e-14
    trace_path = tmp_path / "trace.json"
    result = qkv_check("--data", tampered(nudge), "--trace", trace_path)
    assert result.returncode == 0, result.stdout + result.stderr
    record = json.loads(trace_path.read_text(encoding="utf-8"))["arrays"]["O"]
    assert record["exact"] is False
    assert record["max_abs_difference"] == pytest.approx(1e-14, rel=0.05)


def test_a_missing_data_file_stops_with_one_line_and_status_2(tmp_path):
    missing = tmp_path / "no-such-file.json"
    result = qkv_check("--data", missing, "--trace", tmp_path / "trace.json")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert str(missing) in result.stderr
    assert not (tmp_path / "trace.json").exists()


@pytest.mark.parametrize("content", ['{"values": ', '{"$schema": "attention.schema.json"}',
                                     DATA.read_text(encoding="utf-8").replace("[1, 0]", '["1", 0]')],
                         ids=["truncated JSON", "missing sections", "a string in a matrix"])
def test_an_invalid_data_file_stops_with_one_line_and_status_2(tmp_path, content):
    broken = tmp_path / "attention.json"
    broken.write_text(content, encoding="utf-8")
    result = qkv_check("--data", broken, "--trace", tmp_path / "trace.json")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""


def test_the_trace_replaces_a_link_at_its_name_never_writes_through_it(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched\n")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "numpy-run.json").symlink_to(victim)
    done = subprocess.run([sys.executable, "-m", "autograder.numpy_check", "--trace", "runs/numpy-run.json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert victim.read_text() == "untouched\n"
    trace = tmp_path / "runs" / "numpy-run.json"
    assert not trace.is_symlink() and json.loads(trace.read_text())["ok"] is True


def test_the_trace_is_never_written_in_a_folder_others_may_change(tmp_path):
    """In a folder anyone may write, someone could put a link at `runs` to a folder of yours: the
    check says where the trace cannot go, in one line, and writes nothing there."""
    shared = tmp_path / "assignment"
    shared.mkdir()
    shared.chmod(0o777)
    mine = tmp_path / "mine"
    mine.mkdir()
    (shared / "runs").symlink_to(mine)
    done = subprocess.run([sys.executable, "-m", "autograder.numpy_check"], cwd=shared, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and f"others may write in {shared} (mode 777)" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and list(mine.iterdir()) == []
