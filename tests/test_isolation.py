"""The isolated runner with real processes: faults stay in their step, tampering gains nothing.

Every fault here is planted in `head_facts`, which only exercise 4 calls, so the test can demand
that exactly that step fails and the other twelve pass untouched.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import threading
import time

import pytest

from support import (IN_CI, REPO, STUB, grade_json, qkv_grade, reference_source, require_sandbox, sandbox_mode,
                     steps_by_id, variant)

FAST = ("--timeout", "0.5", "--seed", "11")
FACTS_BODY = '''    return {
        "divisor": float(np.sqrt(d_k)),'''


def in_facts(code: str) -> str:
    """The reference with `code` run at the start of head_facts."""
    return variant([('def head_facts(t, d_k, d_v):\n', 'def head_facts(t, d_k, d_v):\n' + code)])


def grade_source(tmp_path, source: str, name: str = "attention_head.py", *args: str) -> dict:
    path = tmp_path / name
    path.write_text(source)
    return grade_json(path, *FAST, *args)


def assert_only_ex4(result: dict, status: str, codes: list[str]) -> None:
    steps = steps_by_id(result)
    assert steps["ex4_shapes"]["status"] == status, steps["ex4_shapes"]["feedback"]
    assert steps["ex4_shapes"]["diagnoses"] == codes
    assert steps["ex4_shapes"]["score"] == 0.0
    others = {sid: (s["status"], s["diagnoses"]) for sid, s in steps.items() if sid != "ex4_shapes"}
    assert all(v == ("passed", []) for v in others.values()), others
    assert result["score"] == result["max_score"] - steps["ex4_shapes"]["max_score"]


def test_reference_scores_full_marks(tmp_path):
    result = grade_source(tmp_path, reference_source())
    assert result["score"] == result["max_score"] == 100.0
    assert [s["status"] for s in result["steps"]] == ["passed"] * 13
    assert result["written_answers"] == {f"ANSWER_{i}": True for i in range(1, 6)}


def test_stub_scores_zero_with_every_step_not_implemented():
    result = grade_json(STUB, *FAST)
    assert result["score"] == 0.0
    assert [s["status"] for s in result["steps"]] == ["not_implemented"] * 13
    assert all(s["diagnoses"] == ["not-implemented"] for s in result["steps"])
    assert result["written_answers"] == {f"ANSWER_{i}": False for i in range(1, 6)}


@pytest.mark.parametrize("code, status, diagnosis", [
    ("    while True:\n        pass\n", "timeout", ["timeout"]),
    ("    import sys\n    sys.exit(3)\n", "error", ["exit-called"]),
    ("    exit()\n", "error", ["exit-called"]),
    ("    import os\n    os._exit(0)\n", "error", ["exit-called"]),
    ("    import posix\n    posix._exit(0)\n", "error", ["exit-called"]),
    ("    raise SystemExit\n", "error", ["exit-called"]),
    ("    import os, signal\n    os.kill(os.getpid(), signal.SIGKILL)\n", "error", ["crashed"]),
    ("    import ctypes\n    ctypes.string_at(0)\n", "error", ["crashed"]),
    ("    big = np.ones(2**31)\n", "error", ["memory-limit"]),
    ("    raise RuntimeError('not today')\n", "failed", ["crashed"]),
], ids=["loop", "sys.exit", "exit", "os._exit", "posix._exit", "SystemExit", "SIGKILL", "segfault", "memory",
        "exception"])
def test_a_fault_in_one_step_fails_that_step_and_no_other(tmp_path, code, status, diagnosis):
    assert_only_ex4(grade_source(tmp_path, in_facts(code)), status, diagnosis)


def test_a_flood_of_output_is_capped_and_the_step_still_passes(tmp_path):
    code = "    import os\n    print('x' * 5_000_000)\n    os.write(1, b'y' * 5_000_000)\n"
    path = tmp_path / "attention_head.py"
    path.write_text(in_facts(code) + "\nprint('z' * 3_000_000)\n")
    done = qkv_grade(str(path), "--format", "json", *FAST)
    assert done.returncode == 0
    assert len(done.stdout) < 100_000
    result = json.loads(done.stdout)
    assert result["score"] == 100.0
    assert len(result["output"]) < 5_000 and "more characters not kept" in result["output"]


def test_an_import_that_hangs_scores_zero_and_the_command_still_exits_zero(tmp_path):
    path = tmp_path / "attention_head.py"
    path.write_text("import numpy as np\nwhile True:\n    pass\n")
    done = qkv_grade(str(path), "--format", "json", *FAST)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["score"] == 0.0
    assert {s["status"] for s in result["steps"]} == {"timeout"}
    assert "did not finish" in result["steps"][0]["feedback"]


def test_calls_each_just_within_their_limit_share_one_budget_and_the_rest_of_the_class_is_graded(tmp_path):
    """Every call sleeps just under its limit, and every fresh process sleeps at import: each alone
    is allowed, but one after another they would hold a worker for minutes. The run's time budget
    (the import's limit and twenty calls' limits) ends it: the steps it never reached say so, none
    is called again, and the classmate beside it is graded as ever."""
    from autograder.runner import BUDGET_CALLS, Limits

    slow = reference_source().replace("import numpy as np\n", "import time\nimport numpy as np\ntime.sleep(2)\n", 1)
    for name in ("project_qkv", "scores", "scale", "softmax_rows", "mix", "is_attention_weights", "head_facts"):
        slow = slow.replace(f"def {name}(", f"def _{name}(", 1) + (
            f"\n\ndef {name}(*args):\n    time.sleep(0.4)\n    return _{name}(*args)\n")
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "slow.py").write_text(slow)
    (folder / "honest.py").write_text(reference_source())
    started = time.monotonic()
    done = qkv_grade(str(folder), "--format", "json", "--seed", "11", "--timeout", "0.5", "--out", str(tmp_path / "out"))
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    results = {result["submission"].rsplit("/", 1)[-1]: result for result in json.loads(done.stdout)}
    assert results["honest.py"]["score"] == 100.0
    steps = steps_by_id(results["slow.py"])
    budget = Limits(call_timeout=0.5).budget
    assert budget == 10 + BUDGET_CALLS * 0.5
    unreached = [sid for sid, step in steps.items() if "time-budget" in step["diagnoses"]]
    assert len(unreached) >= 5, {sid: step["diagnoses"] for sid, step in steps.items()}
    for sid in unreached:
        assert steps[sid]["status"] == "timeout" and steps[sid]["carried_from"] is None
        assert "time budget" in steps[sid]["feedback"]
    # 116 calls of 0.4 s, and as many imports of 2 s as calls that ran past 0.5 s: minutes without it
    assert seconds < 3 * budget, seconds


def test_a_slow_import_run_again_after_each_call_that_hangs_costs_the_other_steps_nothing(tmp_path):
    """An honest module with a slow line at import (a notebook's exploration cell, say) and a
    softmax that hangs on inputs other than the example's: every call that hangs ends its process,
    and the fresh one runs the slow line again. Those imports are not charged to the budget (up to
    what the first took), so the steps that never call softmax keep their points."""
    source = reference_source().replace("import numpy as np\n", "import time\nimport numpy as np\ntime.sleep(3)\n", 1)
    source = source.replace("    shifted = s - s.max(axis=-1, keepdims=True)",
                            "    while s.shape[-1] != 3:\n        pass\n    shifted = s - s.max(axis=-1, keepdims=True)", 1)
    result = grade_source(tmp_path, source, "attention_head.py", "--timeout", "0.3")
    steps = steps_by_id(result)
    assert not [sid for sid, step in steps.items() if "time-budget" in step["diagnoses"]], \
        {sid: step["diagnoses"] for sid, step in steps.items()}
    for sid in ("qkv", "scores", "scale", "mix", "ex2_row_normalization", "ex3_value_shift", "ex4_shapes"):
        assert steps[sid]["status"] == "passed", (sid, steps[sid]["feedback"])
    assert steps["softmax"]["status"] == "timeout"


def test_imports_run_again_after_hanging_calls_are_free_only_up_to_one_import_limit_in_all(tmp_path):
    """A module whose import takes most of its limit, and whose every function hangs: each hanging
    call ends its process, and the fresh one imports again. Were each of those imports free, every
    hang would buy another, and one submission would hold its worker for minutes (two at 5 s each
    for every step). Free re-imports are one import's limit in all, so the run ends near its
    budget and that limit."""
    from autograder.runner import Limits

    hangs = "import time\n_t = time.monotonic()\nwhile time.monotonic() - _t < 5:\n    pass\n\n\n" + "".join(
        f"def {name}(*args, **kwargs):\n    while True:\n        pass\n\n\n"
        for name in ("project_qkv", "scores", "scale", "softmax_rows", "mix", "attention", "self_attention_head",
                     "zero_query_mixture", "is_attention_weights", "column_normalized_counterexample",
                     "shifted_output", "output_change", "head_facts", "value_intervention"))
    started = time.monotonic()
    result = grade_source(tmp_path, hangs, "attention_head.py", "--timeout", "0.2")
    seconds = time.monotonic() - started
    limits = Limits(call_timeout=0.2)
    assert result["score"] == 0.0 and {step["status"] for step in result["steps"]} == {"timeout"}
    assert "time-budget" in result["steps"][-1]["diagnoses"]
    assert seconds < limits.budget + limits.import_timeout + 8, seconds


def test_an_import_that_fails_scores_zero_with_the_error_and_line(tmp_path):
    result = grade_source(tmp_path, "import numpy as np\n\ndef scores(q, k)\n    return q\n")
    assert result["score"] == 0.0
    assert {s["status"] for s in result["steps"]} == {"error"}
    assert "SyntaxError" in result["steps"][0]["feedback"] and "line 3" in result["steps"][0]["feedback"]


def test_patching_numpy_pytest_and_builtins_gains_nothing(tmp_path):
    tamper = '''
import builtins, numpy, numpy.testing
numpy.allclose = lambda *a, **k: True
numpy.array_equal = lambda *a, **k: True
numpy.testing.assert_allclose = lambda *a, **k: None
builtins.isinstance = lambda *a: True
try:
    import pytest
    pytest.approx = lambda *a, **k: a[0]
except ImportError:
    pass

class Always(numpy.ndarray):
    def __eq__(self, other):
        return True

class Liar:
    shape = (3, 3)
    def __eq__(self, other):
        return True
    def __array__(self, *a, **k):
        return numpy.zeros((3, 3))

def scores(q, k):
    return numpy.zeros((q.shape[0], q.shape[0])).view(Always)

def scale(d, d_k):
    return Liar()

def softmax_rows(s):
    return "0.4, 0.2, 0.4"

def mix(a, v):
    return None
'''
    result = grade_source(tmp_path, reference_source() + tamper)
    steps = steps_by_id(result)
    for step_id in ("scores", "scale", "softmax", "mix"):
        assert steps[step_id]["score"] == 0.0, steps[step_id]
        assert steps[step_id]["status"] == "failed"
    assert "mismatched elements" in steps["scores"]["feedback"]  # read as its plain array: its == is never asked
    assert "Liar" in steps["scale"]["feedback"]
    assert "type str" in steps["softmax"]["feedback"]
    assert "None" in steps["mix"]["feedback"]
    assert steps["qkv"]["status"] == "passed"


def test_a_tampering_submission_does_not_change_the_next_ones_grade(tmp_path):
    (tmp_path / "a_tamper.py").write_text(
        reference_source() + "\nimport numpy\nnumpy.matmul = lambda *a, **k: 0\nnumpy.exp = None\n")
    (tmp_path / "b_reference.py").write_text(reference_source())
    (tmp_path / "c_stub.py").write_text(STUB.read_text())
    results = grade_json(tmp_path, *FAST, "--jobs", "1", "--out", str(tmp_path / "out"))
    scores = {r["submission"]: r["score"] for r in results}
    assert scores["b_reference.py"] == 100.0
    assert scores["c_stub.py"] == 0.0


def test_an_unprivileged_child_cannot_read_the_reference_data_or_other_submissions(tmp_path):
    require_sandbox()
    secret = tmp_path / "other_student.py"
    secret.write_text("SECRET = 42\n")
    targets = [str(REPO / "solutions" / "attention_head.py"), str(REPO / "data" / "part-iv" / "attention.json"),
               str(REPO / "autograder" / "cases.py"), str(secret), "/etc/passwd"]
    probe = f'''    import os
    seen = []
    for target in {targets!r}:
        try:
            with open(target) as handle:
                handle.read(1)
            seen.append(target)
        except OSError:
            pass
    import autograder_probe if False else None
    raise RuntimeError(f"uid={{os.getuid()}} gid={{os.getgid()}} read={{seen}}")
'''.replace("    import autograder_probe if False else None\n", "")
    result = grade_source(tmp_path, in_facts(probe))
    feedback = steps_by_id(result)["ex4_shapes"]["feedback"]
    assert "read=[]" in feedback, feedback
    if result["isolation"] == "bwrap":
        assert "uid=65534 gid=65534" in feedback, feedback
    assert result["isolation"] == sandbox_mode()


def test_without_the_sandbox_a_root_grader_still_runs_submissions_without_root_powers(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("only a root grader drops privileges")
    path = tmp_path / "attention_head.py"
    path.write_text(in_facts("    import os, fractions, statistics, decimal, functools\n"
                             "    caps = [l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0]\n"
                             "    raise RuntimeError(f'uid={os.getuid()} caps={caps}')\n"))
    result = grade_json(path, *FAST, env={"QKV_SANDBOX": "none"})
    assert result["isolation"] == "none"
    feedback = steps_by_id(result)["ex4_shapes"]["feedback"]
    # nobody where nobody can read Python; otherwise uid 0 holding no capability at all
    assert "uid=65534 caps=0000000000000000" in feedback or "uid=0 caps=0000000000000000" in feedback, feedback
    assert steps_by_id(result)["qkv"]["status"] == "passed"


def test_the_grader_package_cannot_be_imported_from_a_submission(tmp_path):
    require_sandbox()
    probe = '''    found = []
    for name in ("autograder", "solutions", "nbgrader", "pytest"):
        try:
            __import__(name)
            found.append(name)
        except ImportError:
            pass
    raise RuntimeError(f"importable={found}")
'''
    feedback = steps_by_id(grade_source(tmp_path, in_facts(probe)))["ex4_shapes"]["feedback"]
    assert "importable=[]" in feedback, feedback


def test_a_submission_has_no_network(tmp_path):
    require_sandbox()
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    accepted = []

    def accept():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not accepted:
            try:
                accepted.append(server.accept())
            except OSError:
                pass

    listener = threading.Thread(target=accept, daemon=True)
    listener.start()
    probe = f'''    import socket
    try:
        socket.create_connection(("127.0.0.1", {port}), timeout=2).sendall(b"answers please")
        outcome = "connected"
    except OSError as exc:
        outcome = type(exc).__name__
    raise RuntimeError("network: " + outcome)
'''
    feedback = steps_by_id(grade_source(tmp_path, in_facts(probe)))["ex4_shapes"]["feedback"]
    accepted_any = bool(accepted)
    server.close()
    assert not accepted_any
    assert "network: connected" not in feedback and "network: " in feedback


def test_a_submission_cannot_start_processes_so_none_outlive_it(tmp_path):
    require_sandbox()
    seconds = f"{300 + secrets.randbelow(1000)}.{secrets.randbelow(10 ** 6):06d}"  # a command line no one else runs
    probe = f'''    import os, subprocess
    tried = []
    try:
        subprocess.Popen(["sleep", "{seconds}"], start_new_session=True)
        tried.append("popen started")
    except OSError as exc:
        tried.append("popen " + type(exc).__name__)
    try:
        pid = os.fork()
        if pid == 0:
            os.setsid()
            os.execv("/bin/sleep", ["sleep", "{seconds}"])
        tried.append("fork started")
    except OSError as exc:
        tried.append("fork " + type(exc).__name__)
    raise RuntimeError("tried: " + ", ".join(tried))
'''
    (tmp_path / "a.py").write_text(in_facts(probe))
    (tmp_path / "b.py").write_text(reference_source())
    results = grade_json(tmp_path, *FAST, "--jobs", "1", "--out", str(tmp_path / "out"))
    feedback = steps_by_id(results[0])["ex4_shapes"]["feedback"]
    assert "tried: popen PermissionError, fork PermissionError" in feedback, feedback
    assert results[1]["score"] == 100.0
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"sleep {seconds}" not in ps


def test_filling_the_scratch_folder_ends_that_call_and_nothing_is_left(tmp_path):
    require_sandbox()
    probe = '''    import os
    block = b"x" * (1 << 20)
    for n in range(400):
        with open(f"fill{n}", "wb") as handle:
            for _ in range(15):
                handle.write(block)
'''
    # The quota must be what ends the call, not its time: 64 MiB written while another worker
    # writes too can take longer than FAST's 0.5 s, so the call gets 5 s (any other ending fails).
    result = grade_source(tmp_path, in_facts(probe), "attention_head.py", "--timeout", "5")
    steps = steps_by_id(result)
    assert steps["ex4_shapes"]["status"] == "error", steps["ex4_shapes"]["feedback"]
    assert "outgrew its quota" in steps["ex4_shapes"]["feedback"]
    assert all(s["status"] == "passed" for sid, s in steps.items() if sid != "ex4_shapes")


def test_a_quota_outgrown_is_told_of_the_call_that_outgrew_it(tmp_path):
    """The first hidden call passes and leaves a mark; the second fills the scratch folder. The
    results written before the quota is found are taken first, so the fault is the second's."""
    require_sandbox()
    probe = '''    import os
    if t != 5 and not os.path.exists("seen"):
        open("seen", "w").close()
    elif t != 5:
        block = b"x" * (1 << 20)
        for n in range(400):
            with open(f"fill{n}", "wb") as handle:
                for _ in range(15):
                    handle.write(block)
'''
    steps = steps_by_id(grade_source(tmp_path, in_facts(probe), "attention_head.py", "--timeout", "5"))
    feedback = steps["ex4_shapes"]["feedback"]
    assert steps["ex4_shapes"]["score"] == 2.0, feedback  # the example and the first hidden case
    assert "on hidden case 2." in feedback and "outgrew its quota" in feedback, feedback
    assert all(s["status"] == "passed" for sid, s in steps.items() if sid != "ex4_shapes")


def test_writing_outside_the_scratch_folder_is_refused(tmp_path):
    require_sandbox()
    target = tmp_path / "planted.txt"
    tmp_path.chmod(0o777)
    probe = f'''    import os, tempfile
    wrote = []
    for path in ({str(target)!r}, "/tmp/qkv-planted", "../qkv-planted"):
        try:
            with open(path, "w") as handle:
                handle.write("x")
            wrote.append(path)
        except OSError:
            pass
    with open(os.path.join(tempfile.gettempdir(), "mine.txt"), "w") as handle:  # its own scratch: fine
        handle.write("ok")
    raise RuntimeError(f"wrote={{wrote}} cwd_is_scratch={{os.getcwd() == tempfile.gettempdir()}}")
'''
    feedback = steps_by_id(grade_source(tmp_path, in_facts(probe)))["ex4_shapes"]["feedback"]
    assert "wrote=[] cwd_is_scratch=True" in feedback, feedback
    assert not target.exists()


def test_a_submission_cannot_start_threads_or_touch_other_processes_limits_or_priority(tmp_path):
    require_sandbox()
    probe = '''    import os, resource, threading
    tried = []
    try:
        threading.Thread(target=lambda: None).start()
        tried.append("thread started")
    except RuntimeError:
        tried.append("thread refused")
    for name, attempt in (("prlimit", lambda: resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE, (3, 3))),
                          ("renice", lambda: os.setpriority(os.PRIO_PGRP, 0, 19)),
                          ("idle", lambda: os.sched_setscheduler(os.getppid(), os.SCHED_IDLE, os.sched_param(0)))):
        try:
            attempt()
            tried.append(name + " done")
        except OSError:
            tried.append(name + " refused")
    resource.setrlimit(resource.RLIMIT_NOFILE, (32, 32))  # its own limits stay its own business
    raise RuntimeError("tried: " + ", ".join(tried))
'''
    (tmp_path / "a.py").write_text(in_facts(probe))
    (tmp_path / "b.py").write_text(reference_source())
    results = grade_json(tmp_path, *FAST, "--jobs", "1", "--out", str(tmp_path / "out"))
    feedback = steps_by_id(results[0])["ex4_shapes"]["feedback"]
    assert "tried: thread refused, prlimit refused, renice refused, idle refused" in feedback, feedback
    assert results[1]["score"] == 100.0


def test_a_submission_cannot_make_the_kernel_signal_another_process_for_it(tmp_path):
    require_sandbox()
    probe = '''    import fcntl, os, signal
    tried = []
    r, w = os.pipe()
    for name, attempt in (("owner", lambda: fcntl.fcntl(r, fcntl.F_SETOWN, os.getppid())),
                          ("sig", lambda: fcntl.fcntl(r, 10, int(signal.SIGKILL))),
                          ("notify", lambda: fcntl.fcntl(os.open(".", os.O_RDONLY), 1026, 0x80000000 | 1))):
        try:
            attempt()
            tried.append(name + " done")
        except OSError:
            tried.append(name + " refused")
    fcntl.fcntl(r, fcntl.F_SETFL, os.O_NONBLOCK)  # an ordinary command still works
    raise RuntimeError("tried: " + ", ".join(tried))
'''
    feedback = steps_by_id(grade_source(tmp_path, in_facts(probe)))["ex4_shapes"]["feedback"]
    assert "tried: owner refused, sig refused, notify refused" in feedback, feedback


def test_a_submission_cannot_reach_kernel_state_a_classmate_graded_at_once_shares(tmp_path):
    """Beyond the locks and the page cache (tests/test_redteam.py): a futex keyed by a file every
    sandbox maps, the machine's pool of asynchronous I/O contexts and sysinfo's free memory. A
    private futex, what a process's own locks use, still works."""
    require_sandbox()
    probe = '''    import ctypes, os
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype, libc.mmap.restype = ctypes.c_long, ctypes.c_void_p
    futex, io_setup = {"x86_64": (202, 206), "aarch64": (98, 0)}[os.uname().machine]
    shared = libc.mmap(None, 4096, 1, 1, os.open(np.__file__, os.O_RDONLY), 0)  # PROT_READ, MAP_SHARED
    own = ctypes.c_uint32(0)
    tried = []
    for name, call in (("shared futex", lambda: libc.syscall(futex, ctypes.c_void_p(shared), 1, 1)),  # FUTEX_WAKE
                       ("io_setup", lambda: libc.syscall(io_setup, 64, ctypes.byref(ctypes.c_ulong(0)))),
                       ("sysinfo", lambda: libc.sysinfo(ctypes.create_string_buffer(256)))):
        tried.append(name + (" refused" if call() < 0 and ctypes.get_errno() == 1 else " done"))
    private = libc.syscall(futex, ctypes.byref(own), 1 | 128, 1)  # FUTEX_WAKE_PRIVATE
    raise RuntimeError("tried: " + ", ".join(tried) + "; private futex %d" % private)
'''
    feedback = steps_by_id(grade_source(tmp_path, in_facts(probe)))["ex4_shapes"]["feedback"]
    assert "tried: shared futex refused, io_setup refused, sysinfo refused; private futex 0" in feedback, feedback


def test_a_scratch_tree_of_any_depth_is_removed_whole_without_following_links(tmp_path):
    from autograder.inside import remove_tree

    tree, outside = tmp_path / "tree", tmp_path / "outside"
    tree.mkdir()
    outside.mkdir()
    (outside / "kept").write_text("not the tree's")
    (tree / "link").symlink_to(outside)
    here = os.open(tree, os.O_RDONLY)
    locked = []  # (the folder above, a name): made neither listable nor writable once all is made below it
    for depth in range(1500):  # past the recursion limit, and 300 KB as a path
        name = f"{depth:04d}" + "d" * 196
        os.mkdir(name, dir_fd=here)
        below = os.open(name, os.O_RDONLY, dir_fd=here)
        os.close(os.open("file", os.O_WRONLY | os.O_CREAT, dir_fd=below))
        os.symlink("/", "root", dir_fd=below)
        if depth % 500 == 1:
            locked.append((os.dup(here), name))
        os.close(here)
        here = below
    os.close(here)
    for above, name in locked:
        os.chmod(name, 0o100, dir_fd=above)  # for its owner too
        os.close(above)
    outside.chmod(0o751)
    remove_tree(str(tree))
    assert not tree.exists()
    assert (outside / "kept").read_text() == "not the tree's" and outside.stat().st_mode & 0o777 == 0o751


def test_a_folder_whose_name_became_a_link_is_neither_entered_nor_given_permissions(tmp_path):
    from autograder.inside import _enter

    outside = tmp_path / "outside"
    outside.mkdir(mode=0o751)
    (tmp_path / "swapped").symlink_to(outside)  # what a child finishing a call could make of a folder
    folder = os.open(tmp_path, os.O_RDONLY)
    try:
        with pytest.raises(OSError):
            _enter("swapped", folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    finally:
        os.close(folder)
    assert outside.stat().st_mode & 0o777 == 0o751


def _tree(pid: int) -> list[int]:
    """`pid` and every process below it, each before its children."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop(0)
        found.append(current)
        try:
            with open(f"/proc/{current}/task/{current}/children") as handle:
                todo += [int(child) for child in handle.read().split()]
        except OSError:
            pass
    return found


def _exe(pid: int) -> str | None:
    """A process's program; None for one that has ended (a zombie holds no descriptors). A worker
    and what it forks are not dumpable, so only root may read their program's path: for anyone
    else, the name the kernel keeps for the process, that of the program it started."""
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe"))
    except FileNotFoundError:
        return None
    except PermissionError:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                stat = handle.read()
        except FileNotFoundError:
            return None
        return None if stat[stat.rindex(")") + 2:].startswith("Z") else stat[stat.index("(") + 1:stat.rindex(")")]


def _pipes_held(pid: int) -> set[str]:
    held = set()
    try:
        names = os.listdir(f"/proc/{pid}/fd")  # unreadable: an error, never "holds nothing"
    except FileNotFoundError:  # ended meanwhile
        return held
    for name in names:
        try:
            held.add(os.readlink(f"/proc/{pid}/fd/{name}"))
        except FileNotFoundError:  # closed meanwhile
            pass
    return held


def test_only_the_worker_holds_its_channels_to_the_grader(tmp_path):
    """Neither bubblewrap's own processes (its init, pid 1 of the sandbox, runs as the grader's user
    in a user namespace) nor the fork server, which runs as the submissions' user, may hold either
    pipe: a process that can open its /proc/PID/fd could read and replace the classmate queued in
    one, or write results into the other. Checked once a submission has been graded, so every
    process the worker makes exists."""
    from autograder.grading import Grader
    from autograder.runner import Worker

    if os.geteuid() != 0:
        pytest.skip("a worker is not dumpable: only root may list its descriptors")
    grader = Grader(11)
    (tmp_path / "attention_head.py").write_text(reference_source())
    with Worker(grader.limits) as worker:
        assert grader.grade_path(worker, tmp_path / "attention_head.py").score == 100.0
        channels = {f"pipe:[{os.fstat(fd).st_ino}]" for fd in worker.channels()}
        tree = _tree(worker._process.pid)
        pythons = [pid for pid in tree if (_exe(pid) or "").startswith("python")]
        holders = {pid: _pipes_held(pid) & channels for pid in tree}
    assert len(pythons) >= 2, tree  # the worker, and the fork server below it
    assert {pid for pid, held in holders.items() if held} == {pythons[0]}, holders


def test_calls_are_handed_over_as_far_as_the_childs_own_pipe_holds():
    """A user holding much pipe memory gets pipes of a page or two: the worker hands a child no
    more calls than its pipe holds, rather than blaming an honest child for a full pipe."""
    import fcntl

    from autograder import inside

    read_end, write_end = os.pipe()
    try:
        fcntl.fcntl(write_end, inside.F_SETPIPE_SZ, 4096)
        os.set_blocking(write_end, False)
        arguments = bytes(range(256)) * 36  # three calls of 3000 bytes
        places = [[0, 3000], [3000, 3000], [6000, 3000]]
        assert inside.Worker.hand_over(write_end, places, arguments, time.monotonic() + 5) == 1
        assert os.read(read_end, 65536) == arguments[:3000]
        assert inside.Worker.hand_over(write_end, places[1:], arguments, time.monotonic() + 5) == 1
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_call_larger_than_the_childs_pipe_goes_in_as_the_child_reads_it():
    """On an older kernel a pipe past the user's quota holds one page: a call larger than that is
    written as the child reads, within the call's time, and a child that reads nothing is ended."""
    import fcntl

    from autograder import inside

    arguments = bytes(range(256)) * 24  # one call of 6144 bytes
    read_end, write_end = os.pipe()
    try:
        fcntl.fcntl(write_end, inside.F_SETPIPE_SZ, 4096)
        os.set_blocking(write_end, False)
        got = []
        reader = threading.Thread(target=lambda: [time.sleep(0.1), got.append(os.read(read_end, 4096)),
                                                  time.sleep(0.1), got.append(os.read(read_end, 4096))])
        reader.start()
        assert inside.Worker.hand_over(write_end, [[0, 6144]], arguments, time.monotonic() + 5) == 1
        reader.join()
        assert b"".join(got) == arguments
        started = time.monotonic()
        with pytest.raises(inside.protocol.TimedOut):  # the protocol module inside.py runs with
            inside.Worker.hand_over(write_end, [[0, 6144]], arguments, time.monotonic() + 0.3)
        assert 0.25 < time.monotonic() - started < 3
    finally:
        os.close(read_end)
        os.close(write_end)


@pytest.mark.parametrize("mode", ["bwrap", "bwrap-userns", "landlock"])
def test_closing_a_worker_ends_the_child_running_a_call(mode):
    """A child in the middle of a long call when its worker is ended (the grader interrupted, or
    ending a worker it no longer trusts) goes with it: no process of the worker's outlives it."""
    from autograder import sandbox
    from autograder.grading import Grader
    from autograder.runner import Limits, Worker

    problem = sandbox.available(mode)
    if problem:
        if IN_CI:
            pytest.fail(f"{mode}: {problem}")
        pytest.skip(f"{mode}: {problem}")
    limits = Limits(call_timeout=30.0)  # so the worker itself would not end the call before long
    grader = Grader(11, limits)
    source = in_facts("    import time\n    time.sleep(60)\n")
    with Worker(limits, mode) as worker:
        worker.send("attention_head.py", [source], grader.plan)
        started = time.monotonic()
        tree = _tree(worker._process.pid)
        while len([pid for pid in tree if (_exe(pid) or "").startswith("python")]) < 3:
            assert time.monotonic() - started < 20, tree  # the worker, its fork server, the child
            time.sleep(0.05)
            tree = _tree(worker._process.pid)
        time.sleep(1.0)  # the steps before head_facts's take milliseconds: it is asleep in its call
        assert len(_tree(worker._process.pid)) == len(tree), "the child ended before its worker"
    ended = time.monotonic()
    while any(_exe(pid) is not None for pid in tree):
        assert time.monotonic() - ended < 5, [(pid, _exe(pid)) for pid in tree if _exe(pid)]
        time.sleep(0.05)


def test_what_a_call_does_to_builtins_is_undone_before_the_next_call(tmp_path):
    """Every call of the scores step replaces one builtin, deletes another and adds a third; each
    later call still finds builtins as they were (head_facts, steps later, uses what was changed,
    and would fail on what was added), and the result frames are still written and read."""
    source = variant([
        ('def scores(q, k):\n', 'def scores(q, k):\n'
         '    import builtins\n'
         '    builtins.max = None\n'
         '    builtins.__dict__.pop("abs", None)\n'
         '    builtins.leaked_by_scores = True\n'),
        ('def head_facts(t, d_k, d_v):\n', 'def head_facts(t, d_k, d_v):\n'
         '    assert max(1, 2) == 2 and abs(-1) == 1\n'
         '    try:\n'
         '        leaked_by_scores\n'
         '        raise AssertionError("a builtin added by an earlier call is still there")\n'
         '    except NameError:\n'
         '        pass\n'),
    ])
    result = grade_source(tmp_path, source)
    assert result["score"] == 100.0, [(s["id"], s["feedback"]) for s in result["steps"] if s["status"] != "passed"]


def test_results_described_at_length_are_refused_unread_each_and_in_all(tmp_path):
    """Values within the child's own limits can still take a lot of text to describe: every call
    returning a dict of long lists would have the grader parse, check and hold megabytes, again for
    every call. A result described in more than RESULT_TEXT bytes is refused unread; so is each
    result once a run has described RUN_TEXT bytes in all. Either is a value of the wrong type."""
    from autograder import protocol
    from autograder.runner import RESULT_TEXT, RUN_TEXT

    def described(value) -> int:
        return len(json.dumps(protocol.encode(value, [], [0])))

    huge, long = [0.123456789] * 6000, [0.123456789] * 1900
    assert described(huge) > RESULT_TEXT > described(long) and 100 * described(long) > RUN_TEXT
    others = ("scale", "softmax_rows", "mix", "attention", "self_attention_head", "zero_query_mixture",
              "is_attention_weights", "column_normalized_counterexample", "shifted_output", "output_change",
              "head_facts", "value_intervention")
    source = reference_source() + "\n\ndef scores(q, k):\n    return [0.123456789] * 6000\n" + "".join(
        f"\n\ndef {name}(*args, **kwargs):\n    return [0.123456789] * 1900\n" for name in others)
    steps = steps_by_id(grade_source(tmp_path, source))
    assert steps["qkv"]["status"] == "passed"
    assert steps["scores"]["diagnoses"][:1] == ["wrong-type"]
    assert "too large to read (over 64 KiB described)" in steps["scores"]["feedback"]
    assert all("wrong-type" in steps[sid]["diagnoses"] for sid in steps if sid not in ("qkv", "scores")), steps
    # The run itself: the first long results are read; past the run's bound, the rest are refused
    # unread (hidden cases, after every step's example: the feedback shows an example's call).
    from autograder.grading import Grader
    from autograder.protocol import Bad
    from autograder.runner import Worker
    from autograder.submission import load

    grader = Grader(3)
    (tmp_path / "again.py").write_text(source)
    with Worker(grader.limits, grader.isolation) as worker:
        run = worker.receive(grader.send(worker, load(tmp_path / "again.py")))
    values = [outcome.value for outcomes in run.outcomes[1:] for outcome in outcomes]
    large = [value for value in values if isinstance(value, Bad) and "too large to read" in value.type]
    past = [value for value in values if isinstance(value, Bad) and "describe in all" in value.type]
    read = [value for value in values if isinstance(value, list)]
    every_call = sum(len(calls) for _, calls in grader.calls[1:])  # every step's but the projections'
    scores_calls = dict(grader.calls)["scores"]
    assert len(large) == len(scores_calls) and len(large) + len(past) + len(read) == len(values) == every_call
    assert 20 < len(read) < 96 and past, (len(read), len(past))


@pytest.mark.parametrize("wait", [False, True])
def test_a_worker_closed_while_starting_or_after_leaves_no_scratch_folder(wait):
    """A run that ends before it uses its worker (one unreadable file) closed it while it was still
    loading, before it had named its scratch folder: killed outright, it left the folder behind."""
    import glob

    from autograder import sandbox
    from autograder.runner import Worker

    if sandbox.available("landlock") is not None:
        pytest.skip("the scratch folders of bubblewrap's workers live in their own /tmp")
    worker = Worker(mode="landlock")
    worker.start()
    pid = worker._process.pid
    if wait:
        worker._wait_ready()
    else:  # at least as far as making its folder
        deadline = time.monotonic() + 30
        while not glob.glob(f"/tmp/qkv-scratch-{pid}-*") and time.monotonic() < deadline:
            time.sleep(0.001)
    worker.close()
    assert glob.glob(f"/tmp/qkv-scratch-{pid}-*") == []


# The grader with its judging of one submission slowed down: what a submission whose values take
# seconds to judge would do, without depending on which values those are.
SLOW_JUDGE = """
import sys, time
from autograder import grading
from autograder.cli import main
judged = grading.Grader._judge
def slowly(self, submission, *args):
    if submission.name.startswith("a_"):
        time.sleep(4.0)
    return judged(self, submission, *args)
grading.Grader._judge = slowly
sys.exit(main(sys.argv[1:]))
"""

TRACING = '''import functools

np.set_printoptions(threshold=100000, precision=17)


def _traced(f):
    @functools.wraps(f)
    def traced(*args):
        print("=" * 100, f.__name__, repr(args), [getattr(a, "shape", a) for a in args])
        result = f(*args)
        print(f.__name__, repr(result), "=" * 100)
        return result
    return traced
'''


def test_a_submission_slow_to_judge_costs_the_classmates_run_meanwhile_no_time(tmp_path):
    """While the grader judges one submission it reads nothing from the worker, which runs the next
    ones meanwhile. A worker that waited to pass their results on (correct code that prints much:
    hundreds of kilobytes a run) ran each call's clock on that wait: a classmate lost a call to a
    time limit it never reached. Every classmate here is correct and keeps every point."""
    require_sandbox()
    traced = reference_source().replace("import numpy as np\n", "import numpy as np\n" + TRACING, 1)
    traced = re.sub(r"^def (?!_)", "@_traced\ndef ", traced, flags=re.M)
    assert traced.count("@_traced") == 14
    (tmp_path / "class").mkdir()
    (tmp_path / "class" / "a_first.py").write_text(reference_source())
    for name in "bcdefg":
        (tmp_path / "class" / f"{name}_tracing.py").write_text(traced)
    done = subprocess.run([sys.executable, "-c", SLOW_JUDGE, str(tmp_path / "class"), "--format", "json", "--seed", "1",
                           "--jobs", "1", "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=600,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    scores = {r["submission"]: (r["score"], [s["id"] for s in r["steps"] if s["status"] != "passed"])
              for r in json.loads(done.stdout)}
    assert all(score == (100.0, []) for score in scores.values()), scores
