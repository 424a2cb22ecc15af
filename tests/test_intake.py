"""Whatever one submission hands in costs the grader a bounded time and memory, and only that
submission its grade. Real qkv-grade runs, the grader process itself measured from /proc: its
peak resident memory (VmHWM) and its own CPU time (utime + stime), never its workers'.

Before, a notebook's JSON was parsed and believed whole: deep nesting, hundreds of thousands of
values, 10^5 cells (converted by nbformat before any cell was counted) or one cell of tens of MB
held the grader for many seconds and hundreds of MiB, and a submission returning 8 MiB uint8
arrays took it to 492 MiB once the judge read them as float64. A student's folder of half a million
empty files was listed, sorted and kept whole: 8 s and 440 MiB, growing with every file.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from support import reference_source, require_sandbox

from autograder.submission import (MAX_BYTES, MAX_CELLS, MAX_ITEMS, MAX_NESTING, MAX_SOURCE, MOST_ENTRIES,
                                   MOST_ENTRIES_IN_ALL)

SEED = 5
MAX_RSS_MIB = 300
MAX_CPU_S = 5.0


def measured(*args: str, cwd: Path | None = None) -> tuple[subprocess.CompletedProcess, float, float]:
    """qkv-grade run to its end: (the run, the grader's peak RSS in MiB, its own CPU seconds).

    The grader is polled every few milliseconds; its high-water mark only grows, and its CPU time
    is read once more after it has exited, before it is reaped."""
    process = subprocess.Popen([sys.executable, "-m", "autograder.cli", *args], cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    streams: dict[str, str] = {}
    readers = [threading.Thread(target=lambda name=name, stream=stream: streams.__setitem__(name, stream.read()))
               for name, stream in (("out", process.stdout), ("err", process.stderr))]
    for reader in readers:
        reader.start()
    peak, cpu, tick = 0, 0.0, os.sysconf("SC_CLK_TCK")

    def own_cpu() -> float:
        fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick  # utime, stime: the children's are apart

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        except (OSError, IndexError):
            pass
        if os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            cpu = own_cpu()  # exited, not yet reaped: its final account
            break
        time.sleep(0.003)
    else:
        process.kill()
    process.wait()
    for reader in readers:
        reader.join()
    done = subprocess.CompletedProcess(process.args, process.returncode, streams["out"], streams["err"])
    return done, peak / 1024, cpu


def _cell(source, **fields) -> dict:
    return {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source, **fields}


def _v4(*cells: dict, metadata=None) -> str:
    return json.dumps({"nbformat": 4, "nbformat_minor": 5, "metadata": metadata or {}, "cells": list(cells)})


def _v3(cells: list[dict]) -> str:
    return json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {},
                       "worksheets": [{"cells": cells, "metadata": {}}]})


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# name -> (how to write it into a folder, what its result's error says; None: graded)
HOSTILE = {
    "fifty_mb.ipynb": (lambda p: _write(p, _v4(_cell(reference_source()), _cell("x = 1\n", outputs=[
        {"output_type": "stream", "name": "stdout", "text": "x" * (50 << 20)}]))), "too large"),
    "nested_metadata.ipynb": (lambda p: _write(p, _v4(_cell(reference_source())).replace(
        '"metadata": {}', '"metadata": {"deep": ' + _nested(100_000) + "}", 1)), "nested more than"),
    "nested_source.ipynb": (lambda p: _write(p, _v4(_cell(reference_source())).replace(
        '"source": ', '"source": ' + _nested(100_000) + ', "x": ', 1)), "nested more than"),
    "many_values.ipynb": (lambda p: _write(p, _v4(_cell(reference_source()), metadata={"x": [0] * 3_000_000})),
                          "JSON values"),
    "cells_v4.ipynb": (lambda p: _write(p, _v4(*[_cell("x = 1\n")] * 100_000)), "JSON values"),
    "cells_v3.ipynb": (lambda p: _write(p, _v3([{"cell_type": "code", "input": "x = 1\n"}] * 100_000)),
                       "JSON values"),
    "cells_v3_over_the_cap.ipynb": (lambda p: _write(p, _v3([{"cell_type": "code", "input": "x = 1\n"}]
                                                            * (MAX_CELLS + 1))), "code cells, more than"),
    "cells_v3_markdown.ipynb": (lambda p: _write(p, _v3([{"cell_type": "code", "input": reference_source()}]
                                                        + [{"cell_type": "markdown", "source": "m"}] * 20_000)),
                                None),
    "thirty_mb_cell.ipynb": (lambda p: _write(p, _v4(_cell("x = 1\n" * (5 << 20)))), "too large"),
    "fifteen_mb_cell.ipynb": (lambda p: _write(p, _v4(_cell("x = 1;" * ((5 << 20) // 2)))), "characters of code"),
    "dense_cell.ipynb": (lambda p: _write(p, _v4(_cell(reference_source()), _cell(
        "get_ipython()\n" + "1;" * ((MAX_SOURCE - 20_000) // 2) + "\n"))), None),
    "nested_code.ipynb": (lambda p: _write(p, _v4(_cell(reference_source()), _cell("x = " + _nested(400_000)))),
                          None),
    "big_module.py": (lambda p: _write(p, reference_source() + "x = 1\n" * (MAX_SOURCE // 6)), "characters of code"),
    # An unclosed string full of escaped quotes: read from every quote to the end, it took hours.
    "unclosed_string.ipynb": (lambda p: (p.write_bytes(b'"' + b'\\"' * 20_000 + b"a" * (2 << 20)), p)[1],
                              "a string is never closed"),
    # Help at the end of a long line: IPython's pattern for it reads the line again from every
    # character (minutes for this one); such a cell is charged the square of its line.
    "help_line.ipynb": (lambda p: _write(p, _v4(_cell(reference_source()), _cell("a" * 120_000 + " ?\n"))), None),
    "uint8_results.py": (lambda p: _write(p, (Path(__file__).parent / "submissions" / "uint8_results.py")
                                          .read_text()), None),
}


def test_the_budgets_are_what_the_readme_states():
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    for figure in (f"{MAX_BYTES >> 20} MiB", f"{MAX_SOURCE:,}".replace(",", " "), f"{MAX_CELLS:,}".replace(",", " "),
                   f"{MAX_ITEMS:,}".replace(",", " "), f"{MAX_NESTING} levels",
                   f"at most {MOST_ENTRIES:,} files and folders".replace(",", " "),
                   f"at most {MOST_ENTRIES_IN_ALL:,} outside".replace(",", " ")):
        assert figure in readme, figure


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_one_hostile_submission_costs_the_grader_a_bounded_time_and_memory(tmp_path, name):
    require_sandbox()
    write, error = HOSTILE[name]
    path = write(tmp_path / name)
    done, rss, cpu = measured(str(path), "--format", "json", "--seed", str(SEED), "--timeout", "0.5")
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    if error is None:
        assert "error" not in result, result["error"]
    else:
        assert error in result["error"] and "\n" not in result["error"], result.get("error")
    print(f"{name}: {rss:.0f} MiB, {cpu:.2f} s")
    assert rss < MAX_RSS_MIB and cpu < MAX_CPU_S, (name, f"{rss:.0f} MiB", f"{cpu:.2f} s")


def test_a_student_folder_of_thousands_of_files_is_listed_not_read(tmp_path):
    require_sandbox()
    folder = tmp_path / "class"
    student = folder / "submitted" / "mallory" / "ps1"
    student.mkdir(parents=True)
    (folder / "nbgrader_config.py").write_text("c = get_config()\n")  # a course's root
    (student / "attention_head.py").write_text(reference_source())
    for number in range(1000):
        (student / f"copy{number}.py").write_text("x = 1\n")
        (student / f"copy{number}.ipynb").write_text("{}")
    done, rss, cpu = measured(str(folder), "--format", "json", "--seed", str(SEED), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert [result["score"] for result in json.loads(done.stdout)] == [100.0]
    # listed up to a bound, the rest counted in one line
    from autograder.submission import MOST_SKIPPED_LISTED
    assert done.stderr.count("not graded: submitted/mallory/ps1/copy") == MOST_SKIPPED_LISTED
    assert f"not graded: submitted/mallory/…: {2000 - MOST_SKIPPED_LISTED} more files in this student's folder" \
        in done.stderr, done.stderr[-500:]
    assert rss < MAX_RSS_MIB and cpu < MAX_CPU_S, (f"{rss:.0f} MiB", f"{cpu:.2f} s")


def test_a_classmates_flood_of_empty_folders_uses_up_their_own_share_alone(tmp_path, monkeypatch):
    """Empty folders cost an inode each, as empty files do (which are not counted): a classmate's
    flood of them in a shared drop folder, read first in the file system's order, once used up the
    bound of what is looked at there and left the others' submissions out. Each account may now use
    all of it but a tenth. (The bound made small here; the classmates' files are other accounts'.)"""
    from autograder import submission

    if os.geteuid() != 0:
        pytest.skip("making files of another account takes root")
    monkeypatch.setattr(submission, "MOST_ENTRIES_IN_ALL", 400)
    folder = tmp_path / "drop"
    folder.mkdir()
    for number in range(500):  # the flood, made by this account
        (folder / f"junk{number:04d}").mkdir()
    for number in range(30):  # the class, each of other accounts
        path = folder / f"s{number:02d}.py"
        path.write_text("x = 1\n")
        os.chown(path, 4200 + number, 4200 + number)  # each classmate an account of their own
    found = submission.discover(folder)
    assert [name for _, name in found.items] == [f"s{number:02d}.py" for number in range(30)]
    assert any("more than 360 files and folders made by" in str(reason) for _, reason in found.skipped), \
        found.skipped[-3:]


def test_one_long_file_name_widens_its_own_row_of_the_listing_alone(tmp_path):
    """A file named with control characters shows each as a 4-character escape: one student's
    such name, listed as not graded, once padded every classmate's row to its width."""
    require_sandbox()
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "ada.py").write_text(reference_source())
    (folder / ("\x01" * 250 + ".PY")).write_text("x = 1\n")  # not a .py: listed as not graded
    done, _, _ = measured(str(folder), "--seed", str(SEED), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    rows = done.stdout.splitlines()
    ada = next(row for row in rows if row.startswith("ada.py "))
    from autograder.cli import NAME_COLUMN
    assert len(ada) <= NAME_COLUMN + len("     100 / 100"), ada  # the score column after the names
    assert any(row.startswith("\\x01" * 250) and "not graded" in row for row in rows), rows


def _me() -> str:
    import pwd

    return f"{pwd.getpwuid(os.getuid()).pw_name} (uid {os.getuid()})"


def test_a_student_folder_of_more_files_than_the_grader_looks_at_costs_a_bounded_time_and_memory(tmp_path):
    """Empty files by the tens of thousands in one student's folder, past the bound on what a
    student's folder has looked at: that folder is walked only to the bound and said so in one line,
    and the classmates beside it are graded as ever."""
    from autograder.submission import MOST_ENTRIES, MOST_SKIPPED_LISTED

    require_sandbox()
    folder = tmp_path / "class"
    (folder / "alice").mkdir(parents=True)
    (folder / "alice" / "attention_head.py").write_text(reference_source())
    (folder / "bob.py").write_text(reference_source())
    (folder / "mallory").mkdir()
    for number in range(MOST_ENTRIES + 10_000):
        os.close(os.open(folder / "mallory" / f"f{number}.py", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    done, rss, cpu = measured(str(folder), "--format", "json", "--seed", str(SEED), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr[-2000:]
    assert {result["submission"]: result["score"] for result in json.loads(done.stdout)} == \
        {"alice/attention_head.py": 100.0, "bob.py": 100.0}
    assert done.stderr.count("not graded: mallory/f") == MOST_SKIPPED_LISTED, done.stderr[-500:]
    assert (f"not graded: mallory/…: {MOST_ENTRIES - MOST_SKIPPED_LISTED} more files in this student's folder, "
            f"which holds more than {MOST_ENTRIES} files and folders made by {_me()}: only the first {MOST_ENTRIES} were looked "
            "at, and the rest were neither graded nor listed\n") in done.stderr, done.stderr[-500:]
    print(f"{rss:.0f} MiB, {cpu:.2f} s")
    assert rss < MAX_RSS_MIB and cpu < MAX_CPU_S, (f"{rss:.0f} MiB", f"{cpu:.2f} s")


def test_every_other_submission_gets_the_grade_it_gets_alone(tmp_path):
    """The hostile submissions beside two honest ones, in one folder run, then the honest ones alone."""
    require_sandbox()
    honest = {"a_correct.ipynb": _v4(_cell(reference_source())),
              "b_unscaled.py": reference_source().replace("s = d / np.sqrt(d_k)  # [T, T]", "s = d  # [T, T]")}
    alone, beside = tmp_path / "alone", tmp_path / "beside"
    for folder in (alone, beside):
        folder.mkdir()
        for name, text in honest.items():
            _write(folder / name, text)
    for name, (write, _) in HOSTILE.items():
        write(beside / name)

    def graded(folder: Path) -> dict:
        done, rss, cpu = measured(str(folder), "--format", "json", "--seed", str(SEED), "--timeout", "0.5",
                                  "--out", str(tmp_path / f"out-{folder.name}"))
        assert done.returncode == 0, done.stderr[-2000:]
        return {result["submission"]: result for result in json.loads(done.stdout)}

    together, apart = graded(beside), graded(alone)
    assert sorted(together) == sorted([*honest, *HOSTILE])
    for name in honest:
        assert [(s["id"], s["score"], s["status"], s["diagnoses"]) for s in together[name]["steps"]] == \
            [(s["id"], s["score"], s["status"], s["diagnoses"]) for s in apart[name]["steps"]], name
    assert together["a_correct.ipynb"]["score"] == 100.0
    for name, (_, error) in HOSTILE.items():
        assert (error is None) == ("error" not in together[name]), name


def _student_folders(root: Path) -> None:
    """alice's folder: her notebook beside a module; bob's: a module alone."""
    stub = (Path(__file__).resolve().parents[1] / "assignments" / "attention_head" / "attention_head.py").read_text()
    (root / "alice" / "a").mkdir(parents=True)
    (root / "alice" / "a" / "attention_head.py").write_text(stub)
    (root / "alice" / "a" / "attention_head.ipynb").write_text(_v4(_cell(reference_source())))
    (root / "bob").mkdir()
    (root / "bob" / "attention_head.py").write_text(reference_source())


def test_a_file_whose_owner_reads_differently_each_time_it_is_looked_at_costs_no_one(tmp_path, monkeypatch):
    """A student moving a file away and back while the folder is read: each look at its owner gives
    another answer. Each file's owner is read once, and every decision takes that reading."""
    from autograder import submission

    _student_folders(tmp_path)
    real, looks = submission._owner, {}

    def there_then_gone(path):  # there at every other look, gone at the others
        looks[path] = looks.get(path, 0) + 1
        return real(path) if looks[path] % 2 else None

    monkeypatch.setattr(submission, "_owner", there_then_gone)
    found = submission.discover(tmp_path)
    assert [name for _, name in found.items] == ["alice/a/attention_head.ipynb", "bob/attention_head.py"], found


def test_whatever_a_student_s_folder_makes_its_sorting_raise_costs_that_folder_alone(tmp_path, monkeypatch):
    from autograder import submission

    _student_folders(tmp_path)

    def changed(path, name):
        raise KeyError(("alice", None))

    monkeypatch.setattr(submission, "untouched_starter", changed)
    found = submission.discover(tmp_path)
    assert [name for _, name in found.items] == ["bob/attention_head.py"], found
    said = dict(found.skipped)
    assert "its folder changed while it was read (KeyError" in said["alice/a/attention_head.ipynb"], said
