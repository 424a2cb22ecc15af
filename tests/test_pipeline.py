"""A worker runs one submission while the next few wait behind it: what waits is never lost.

Each worker holds the submission it runs and, as far as they fit, the next ones queued behind it,
so it never waits for the grader. These tests break that queue on purpose, with one worker (--jobs
1) so that every submission passes through it: a worker killed with submissions waiting, a
submission too large to wait behind one that sends the grader more than a pipe holds, and several
that each fit, but not all together.
"""
from __future__ import annotations

import json

import pytest

from support import qkv_grade, reference_source

FAST = ("--format", "json", "--seed", "5", "--jobs", "1", "--timeout", "2")

# Without a sandbox a submission can reach its own worker's processes: the fork server is its
# parent, the worker that one's parent.
KILL_FORK_SERVER = "\nimport os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n"
KILL_WORKER = ("\nimport os, signal\n"
               "with open('/proc/%d/stat' % os.getppid()) as _stat:\n"
               "    os.kill(int(_stat.read().rsplit(')', 1)[1].split()[1]), signal.SIGKILL)\n")


def scores(tmp_path, files: dict[str, str], *extra: str) -> dict[str, float]:
    folder = tmp_path / "class"
    folder.mkdir()
    for name, source in files.items():
        (folder / name).write_text(source)
    done = qkv_grade(str(folder), *FAST, "--out", str(tmp_path / "out"), *extra, timeout=240)
    assert done.returncode == 0, done.stderr
    return {result["submission"]: result["score"] for result in json.loads(done.stdout)}


@pytest.mark.parametrize("killer", [KILL_FORK_SERVER, KILL_WORKER], ids=["fork-server", "worker"])
def test_a_submission_waiting_behind_a_worker_that_dies_is_graded_by_a_fresh_one(tmp_path, killer):
    correct = reference_source()
    got = scores(tmp_path, {"a_killer.py": correct + killer, "b.py": correct, "c.py": correct, "d.py": correct},
                 "--no-sandbox")
    assert {name: got[name] for name in ("b.py", "c.py", "d.py")} == {"b.py": 100.0, "c.py": 100.0, "d.py": 100.0}


def test_a_worker_ended_from_outside_midway_costs_the_submission_nothing(tmp_path):
    """A worker killed while a submission's steps are under way, some of its calls answered (the
    memory killer, an administrator): the submission runs once more, from the start, in a new worker,
    and its grade is the one it earns, not a crash charged to it. (Without a sandbox the submission
    can reach its worker: on its first run only, its exercise 4 runs past its time limit, which the
    worker reports, and then its exercise 5 kills the worker, as something outside would.)"""
    slow, killed = tmp_path / "slow-once", tmp_path / "killed-once"
    once = reference_source().replace(
        "    return {\n        \"divisor\"",
        f"    import os, time\n    if not os.path.exists({str(slow)!r}):\n"
        f"        open({str(slow)!r}, 'w').close()\n        time.sleep(30)\n"
        "    return {\n        \"divisor\"", 1).replace(
        "    output_before, weights_before = self_attention_head",
        f"    import os, signal\n    if not os.path.exists({str(killed)!r}):\n"
        f"        open({str(killed)!r}, 'w').close()\n"
        "        with open('/proc/%d/stat' % os.getppid()) as _stat:\n"
        "            os.kill(int(_stat.read().rsplit(')', 1)[1].split()[1]), signal.SIGKILL)\n"
        "    output_before, weights_before = self_attention_head", 1)
    assert once.count("-once") == 4
    got = scores(tmp_path, {"a_killed_once.py": once, "b.py": reference_source()}, "--no-sandbox")
    assert slow.exists() and killed.exists()  # its first run timed out, then lost its worker
    assert got == {"a_killed_once.py": 100.0, "b.py": 100.0}, got


def test_a_submission_that_ends_every_worker_it_meets_is_given_up_after_a_second_try(tmp_path):
    """A worker that died under a submission gets it again (a new worker, from the start), but not for
    ever: one that ends every worker while it is imported is reported, and the run goes on to
    grade the rest of the class."""
    correct = reference_source()
    folder = tmp_path / "class"
    folder.mkdir()
    for name, source in {"a_killer.py": correct + KILL_WORKER, "b.py": correct, "c.py": correct}.items():
        (folder / name).write_text(source)
    done = qkv_grade(str(folder), *FAST, "--out", str(tmp_path / "out"), "--no-sandbox", timeout=240)
    assert done.returncode == 0, done.stderr
    results = {result["submission"]: result for result in json.loads(done.stdout)}
    assert results["b.py"]["score"] == results["c.py"]["score"] == 100.0
    killer = results["a_killer.py"]
    assert killer["score"] == 0.0 and killer["steps"][0]["diagnoses"] == ["crashed"], killer["steps"][0]
    assert "the grading worker" in killer["steps"][0]["feedback"], killer["steps"][0]["feedback"]


def test_a_large_submission_waits_for_a_free_worker_rather_than_behind_one_flooding_the_grader(tmp_path):
    """The first sends back far more than a pipe holds (4 MB a call) and the second is larger than
    the channel to the worker: queued behind the first, the grader would wait on the worker
    writing results while the worker waits on the grader reading them."""
    correct = reference_source()
    flood = correct + ("\n_real_head = self_attention_head\n"
                       "def self_attention_head(x, w_q, w_k, w_v):\n"
                       "    return np.zeros(1 << 18), np.zeros(1 << 18)\n")
    large = correct + "\n" + ("# " + "x" * 98 + "\n") * 9_000  # 0.9 MB of comments, within the source budget
    got = scores(tmp_path, {"a_flood.py": flood, "b_large.py": large, "c.py": correct})
    assert got["b_large.py"] == 100.0 and got["c.py"] == 100.0, got
    assert got["a_flood.py"] < 100.0


def test_submissions_that_each_fit_behind_a_flooding_one_but_not_all_together_wait_their_turn(tmp_path):
    """Each of these is under half the channel to the worker (256 KiB), so one alone may wait
    behind the first, which floods the grader with results (values just within what one may send,
    some 7 MB in all, far more than a pipe holds); three together would not fit: were they all
    written, the grader would wait on the worker, and the worker on the grader."""
    correct = reference_source()
    flood = correct + ("\ndef self_attention_head(x, w_q, w_k, w_v):\n"
                       "    return np.zeros(60_000), np.zeros(60_000)\n")
    sizable = correct + "\n" + ("# " + "x" * 98 + "\n") * 1_100  # about 120 KB each
    files = {"a_flood.py": flood, **{f"{name}.py": sizable for name in "bcde"}}
    got = scores(tmp_path, files)
    waiting = ("b.py", "c.py", "d.py", "e.py")
    assert {name: got[name] for name in waiting} == dict.fromkeys(waiting, 100.0), got
    assert got["a_flood.py"] < 100.0
