"""The results folder of `qkv-grade FOLDER`: a folder per run, names that never collide, every
file found accounted for, and interrupted runs marked and finished with --resume."""
from __future__ import annotations

import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import nbformat
import pytest

from support import REPO, copy_sample_class, nested, qkv_grade, read_only, reference_source, small_disk, variant

from autograder.store import INCOMPLETE, result_file

SCHEMA = json.loads((REPO / "data" / "results.schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)
FAST = ("--timeout", "0.5")
NO_SCALING = [("s = d / np.sqrt(d_k)  # [T, T]", "s = d  # [T, T]")]


def runs(out: Path) -> list[Path]:
    return sorted(path for path in out.iterdir() if path.name.startswith("run-"))


def check_run(folder: Path) -> dict[str, dict]:
    """A finished run folder: its summary lists exactly the results beside it; returns them."""
    assert not folder.name.endswith(INCOMPLETE)
    manifest = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "finished"
    rows = list(csv.DictReader((folder / "summary.csv").open(encoding="utf-8")))
    graded = {row["submission"]: row for row in rows if not row["skipped"]}
    on_disk = {path.name for path in folder.iterdir()} - {"run.json", "summary.csv"}
    assert on_disk == {result_file(name) for name in graded} == set(manifest["submissions"].values())
    documents = {}
    for name, row in graded.items():
        document = json.loads((folder / result_file(name)).read_text(encoding="utf-8"))
        VALIDATOR.validate(document)
        assert document["submission"] == name and document["seed"] == manifest["seed"]
        assert f"{document['score']:g}" == row["score"]
        documents[name] = document
    return documents


def test_names_that_would_collide_get_results_of_their_own(tmp_path):
    folder, out = tmp_path / "class", tmp_path / "out"
    folder.mkdir()
    (folder / "a b.py").write_text(reference_source())
    (folder / "a_b.py").write_text(variant(NO_SCALING))
    (folder / "a%20b.py").write_text(reference_source())
    done = qkv_grade(str(folder), "--out", str(out), "--seed", "4", *FAST)
    assert done.returncode == 0, done.stderr
    documents = check_run(out / "latest")
    assert sorted(documents) == ["a b.py", "a%20b.py", "a_b.py"]
    assert documents["a b.py"]["score"] == 100 and documents["a_b.py"]["score"] < 100


def test_result_names_are_stable_and_distinct():
    names = ["a b.py", "a_b.py", "a/b.py", "a__b.py", "a%2Fb.py", ".x.py", "x" * 400 + ".py", "x" * 401 + ".py"]
    files = [result_file(name) for name in names]
    assert len(set(files)) == len(names)
    assert files == [result_file(name) for name in names]
    assert all(len(file) < 255 and not file.startswith(".") and "/" not in file for file in files)


def test_every_file_found_is_graded_or_listed_as_skipped_with_a_reason(tmp_path):
    folder, out = tmp_path / "class", tmp_path / "out"
    (folder / "submitted" / "una" / "ps1").mkdir(parents=True)
    (folder / "zed.py").write_text(reference_source())
    (folder / "zed.ipynb").write_text("{}")
    (folder / "conftest.py").write_text("")
    (folder / "SHOUTED.PY").write_text(reference_source())
    (folder / "submitted" / "una" / "ps1" / "attention_head-Copy1.ipynb").write_text("{}")
    (folder / "submitted" / "una" / "ps1" / "attention_head.py").write_text(reference_source())
    done = qkv_grade(str(folder), "--out", str(out), "--seed", "4", *FAST)
    assert done.returncode == 0, done.stderr
    check_run(out / "latest")
    rows = {row["submission"]: row for row in csv.DictReader((out / "latest" / "summary.csv").open())}
    assert set(rows) == {"zed.py", "zed.ipynb", "conftest.py", "SHOUTED.PY", "submitted/una/ps1/attention_head-Copy1.ipynb",
                         "submitted/una/ps1/attention_head.py"}
    assert "rename it to end in .py" in rows["SHOUTED.PY"]["skipped"]
    assert "zed.py beside it" in rows["zed.ipynb"]["skipped"]
    assert "only attention_head.py" in rows["submitted/una/ps1/attention_head-Copy1.ipynb"]["skipped"]
    assert rows["conftest.py"]["skipped"] and not rows["zed.py"]["skipped"]
    for name in ("zed.ipynb", "attention_head-Copy1.ipynb", "conftest.py", "SHOUTED.PY"):
        assert name in done.stdout and "not graded" in done.stdout
    as_json = qkv_grade(str(folder), "--out", str(out), "--seed", "4", "--format", "json", *FAST)
    assert [result["submission"] for result in json.loads(as_json.stdout)] == ["submitted/una/ps1/attention_head.py",
                                                                                "zed.py"]
    for name in ("zed.ipynb", "attention_head-Copy1.ipynb", "conftest.py", "SHOUTED.PY"):  # stdout is the JSON alone
        assert f"qkv-grade: not graded: " in as_json.stderr and name in as_json.stderr


def test_a_folder_nested_a_thousand_deep_is_listed_as_skipped_and_everyone_is_graded(tmp_path):
    folder, out = tmp_path / "class", tmp_path / "out"
    (folder / "submitted" / "mallory" / "ps1").mkdir(parents=True)
    (folder / "submitted" / "una" / "ps1").mkdir(parents=True)
    (folder / "submitted" / "una" / "ps1" / "attention_head.py").write_text(reference_source())
    (folder / "submitted" / "mallory" / "ps1" / "attention_head.py").write_text(reference_source())
    (folder / "nbgrader_config.py").write_text("c = get_config()\n")  # a course's root
    with nested(folder / "submitted" / "mallory" / "ps1", 1000):
        done = qkv_grade(str(folder), "--out", str(out), "--seed", "4", *FAST)
    assert done.returncode == 0, done.stderr
    rows = {row["submission"]: row for row in csv.DictReader((out / "latest" / "summary.csv").open())}
    graded = {name for name, row in rows.items() if not row["skipped"]}
    assert graded == {"submitted/una/ps1/attention_head.py", "submitted/mallory/ps1/attention_head.py"}
    [deep] = [name for name, row in rows.items() if row["skipped"]]
    assert deep.startswith("submitted/mallory/ps1/d/d/") and "32 folders down" in rows[deep]["skipped"]


def test_a_student_folder_is_one_submission_however_many_copies_it_holds(tmp_path):
    """One student's folder holding thirty copies of a wrong submission in folders of its own, and a
    right one further down, adds no students to the class: each student folder gives one submission
    (the shallowest, then the first by name), here and from the course's root; the rest are listed."""
    wrong = variant(NO_SCALING)
    for root in ("class", "course/submitted"):
        folder = tmp_path / root
        for student in ("ann", "bea"):
            (folder / student / "ps1").mkdir(parents=True)
            (folder / student / "ps1" / "attention_head.py").write_text(reference_source())
        (folder / "mal" / "ps1" / "zz").mkdir(parents=True)
        (folder / "mal" / "ps1" / "zz" / "attention_head.py").write_text(reference_source())
        for n in range(30):
            (folder / "mal" / "ps1" / f"copy{n:02d}").mkdir()
            (folder / "mal" / "ps1" / f"copy{n:02d}" / "attention_head.py").write_text(wrong)
    (tmp_path / "course" / "nbgrader_config.py").write_text("c = get_config()\n")  # what makes it a course's root
    for graded, prefix in ((tmp_path / "class", ""), (tmp_path / "course", "submitted/")):
        out = tmp_path / f"out-{graded.name}"
        done = qkv_grade(str(graded), "--out", str(out), "--seed", "4", "--format", "json", *FAST)
        assert done.returncode == 0, done.stderr
        results = {result["submission"]: result["score"] for result in json.loads(done.stdout)}
        assert set(results) == {f"{prefix}ann/ps1/attention_head.py", f"{prefix}bea/ps1/attention_head.py",
                                f"{prefix}mal/ps1/copy00/attention_head.py"}, sorted(results)
        assert results[f"{prefix}mal/ps1/copy00/attention_head.py"] < 100
        rows = {row["submission"]: row for row in csv.DictReader((out / "latest" / "summary.csv").open())}
        skipped = {name: row["skipped"] for name, row in rows.items() if row["skipped"]}
        assert len(skipped) == 30 and all(name.startswith(f"{prefix}mal/ps1/") for name in skipped)
        assert skipped[f"{prefix}mal/ps1/zz/attention_head.py"] == (
            f"{prefix}mal/ps1/copy00/attention_head.py is graded: one submission per student folder ({prefix}mal/)")


def test_a_notebook_handed_in_beside_the_untouched_starter_module_is_the_one_graded(tmp_path):
    folder, out = tmp_path / "class", tmp_path / "out"
    starter = (REPO / "assignments" / "attention_head" / "attention_head.py").read_text()
    notebook = nbformat.v4.new_notebook()
    notebook.cells.append(nbformat.v4.new_code_cell(reference_source()))
    worked = nbformat.writes(notebook)
    for student, module in (("ann", starter), ("bea", "# reformatted, nothing written\n" + starter + "\n\n"),
                            ("cal", variant(NO_SCALING))):
        (folder / student).mkdir(parents=True)
        (folder / student / "attention_head.py").write_text(module)
        (folder / student / "attention_head.ipynb").write_text(worked)
    done = qkv_grade(str(folder), "--out", str(out), "--seed", "4", "--format", "json", *FAST)
    assert done.returncode == 0, done.stderr
    scores = {result["submission"]: result["score"] for result in json.loads(done.stdout)}
    assert scores == {"ann/attention_head.ipynb": 100.0, "bea/attention_head.ipynb": 100.0,
                      "cal/attention_head.py": scores["cal/attention_head.py"]} and scores["cal/attention_head.py"] < 100
    rows = {row["submission"]: row["skipped"] for row in csv.DictReader((out / "latest" / "summary.csv").open())}
    assert "starter module, untouched" in rows["ann/attention_head.py"]
    assert "attention_head.py beside it is graded" in rows["cal/attention_head.ipynb"]


def test_a_module_far_larger_than_the_starter_is_not_parsed_to_be_compared_with_it(tmp_path):
    from autograder.submission import untouched_starter

    large = tmp_path / "attention_head.py"  # parsing it took 13 s and 2 GB of the grader's memory
    large.write_text("x = [" + "-1," * 1_300_000 + "]\n")
    started = time.monotonic()
    assert not untouched_starter(large)
    assert time.monotonic() - started < 5
    assert untouched_starter(REPO / "assignments" / "attention_head" / "attention_head.py")


def test_a_module_with_a_bom_or_a_declared_encoding_is_read_as_python_reads_it(tmp_path):
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "bom.py").write_bytes(b"\xef\xbb\xbf" + reference_source().encode())
    (folder / "latin.py").write_bytes(("# -*- coding: latin-1 -*-\n# Zoë\n" + reference_source()).encode("latin-1"))
    (folder / "bytes.py").write_bytes(b"# \xff\n" + reference_source().encode())
    (folder / "puny.py").write_bytes(b"# coding: punycode\n-" + b"9" * 300_000)  # its decoder is quadratic
    (folder / "codec.py").write_bytes(b"# coding: rot13\n" + reference_source().encode())
    done = qkv_grade(str(folder), "--out", str(tmp_path / "out"), "--seed", "4", "--format", "json", *FAST)
    results = {result["submission"]: result for result in json.loads(done.stdout)}
    assert results["bom.py"]["score"] == results["latin.py"]["score"] == 100.0
    assert results["bytes.py"]["error"].startswith("bytes.py: not UTF-8 text"), results["bytes.py"]["error"]
    assert results["puny.py"]["error"] == "puny.py: its coding line names punycode, which the grader does not read: use UTF-8"
    assert results["codec.py"]["error"] == "codec.py: not text in the encoding its coding line declares (rot13)"
    assert str(tmp_path) not in done.stdout  # messages name the submission, not the instructor's folders


def test_a_second_run_never_mixes_with_the_first(tmp_path):
    folder, out = tmp_path / "class", tmp_path / "out"
    folder.mkdir()
    for name in ("ann", "bea", "cal"):
        (folder / f"{name}.py").write_text(reference_source())
    first = qkv_grade(str(folder), "--out", str(out), "--seed", "1", *FAST)
    (folder / "cal.py").unlink()
    (folder / "dot.py").write_text(variant(NO_SCALING))
    second = qkv_grade(str(folder), "--out", str(out), "--seed", "2", *FAST)
    assert first.returncode == second.returncode == 0
    older, newer = runs(out)
    assert sorted(check_run(older)) == ["ann.py", "bea.py", "cal.py"]
    assert sorted(check_run(newer)) == ["ann.py", "bea.py", "dot.py"]
    assert (out / "latest").resolve() == newer.resolve()
    assert {document["seed"] for document in check_run(newer).values()} == {2}


def _copy_class(tmp_path: Path, copies: int = 5) -> Path:
    return copy_sample_class(tmp_path / "class", copies)


def test_an_interrupted_run_is_marked_and_resume_finishes_it(tmp_path):
    folder, out = _copy_class(tmp_path), tmp_path / "out"
    complete = qkv_grade(str(folder), "--out", str(tmp_path / "clean"), "--seed", "9", "--format", "json", *FAST)
    expected = {result["submission"]: result["score"] for result in json.loads(complete.stdout)}
    process = subprocess.Popen([sys.executable, "-m", "autograder.cli", str(folder), "--out", str(out), "--seed", "9",
                                "--jobs", "1", "--format", "json", *FAST],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # interrupt once the first result is on disk
        if [path for path in out.glob(f"*{INCOMPLETE}/*.py.json")]:
            break
        time.sleep(0.02)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert "--resume" in stderr and len(stderr.strip().splitlines()) == 1
    printed = {result["submission"]: result["score"] for result in json.loads(stdout)}
    assert printed and all(expected[name] == score for name, score in printed.items())
    [unfinished] = runs(out)
    assert unfinished.name.endswith(INCOMPLETE) and not (out / "latest").exists()
    assert json.loads((unfinished / "run.json").read_text())["status"] == "interrupted"
    kept = sorted(path.name for path in unfinished.glob("*.py.json"))
    assert kept and len(kept) < len(expected)
    gone = kept[0][:-len(".json")]  # a submission withdrawn meanwhile: its saved result goes too
    (folder / gone).unlink()
    del expected[gone]
    done = qkv_grade(str(folder), "--out", str(out), "--resume", "--format", "json", *FAST)
    assert done.returncode == 0, done.stderr
    [finished] = runs(out)
    documents = check_run(finished)
    assert {name: document["score"] for name, document in documents.items()} == expected
    assert finished.name == unfinished.name[:-len(INCOMPLETE)]


def test_resume_grades_again_a_name_that_now_stands_for_another_file(tmp_path):
    """Two students' folders swapped between two sessions (a mix-up put right): renaming a folder
    keeps its files' change times, yet each name now stands for the other's file, so neither
    saved result is kept: each is graded again, on the file the name holds now."""
    from autograder import store
    from autograder.submission import discover

    folder, out = tmp_path / "class", tmp_path / "out"
    for student, source in (("alice", reference_source()), ("ben", variant(NO_SCALING))):
        (folder / student).mkdir(parents=True)
        (folder / student / "attention_head.py").write_text(source)
    clean = qkv_grade(str(folder), "--out", str(tmp_path / "clean"), "--seed", "4", "--format", "json", *FAST)
    before = {result["submission"]: result["score"] for result in json.loads(clean.stdout)}
    assert before["alice/attention_head.py"] == 100.0 > before["ben/attention_head.py"]
    run = store.Run.start(out, folder, 4, {"timeout": 0.5})  # a session cut short, both results saved
    run.note_files(discover(folder).items)
    for name in before:
        run.save(name, (tmp_path / "clean" / "latest" / store.result_file(name)).read_text())
    run.mark("interrupted")
    run.close()
    (folder / "alice").rename(folder / "swap")
    (folder / "ben").rename(folder / "alice")
    (folder / "swap").rename(folder / "ben")
    done = qkv_grade(str(folder), "--out", str(out), "--resume", "--format", "json", *FAST)
    assert done.returncode == 0, done.stderr
    after = {result["submission"]: result["score"] for result in json.loads(done.stdout)}
    assert after == {"alice/attention_head.py": before["ben/attention_head.py"],
                     "ben/attention_head.py": before["alice/attention_head.py"]}, after


@pytest.mark.parametrize("manifest", ["[]", '{"source": 1}', "null"])
def test_resume_passes_over_a_run_folder_whose_manifest_is_no_run_s(tmp_path, manifest):
    """A run folder edited by hand (its run.json a list, null, or without what a run records) is no
    run to take up: one line says there is none, never a traceback."""
    from autograder import store

    folder, out = _copy_class(tmp_path, copies=1), tmp_path / "out"
    run = store.Run.start(out, folder, 1, {"timeout": 0.5})
    run.mark("interrupted")
    run.close()
    (run.folder / "run.json").write_text(manifest)
    done = qkv_grade(str(folder), "--out", str(out), "--resume", *FAST)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "no unfinished run" in done.stderr and "Traceback" not in done.stderr


def test_resume_without_an_unfinished_run_says_so_in_one_line(tmp_path):
    folder = _copy_class(tmp_path)
    done = qkv_grade(str(folder), "--out", str(tmp_path / "out"), "--resume")
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1
    assert "no unfinished run" in done.stderr


def test_resume_takes_up_only_the_latest_run_never_an_older_one_a_finished_run_replaced(tmp_path):
    from autograder import store

    folder, out = _copy_class(tmp_path, copies=1), tmp_path / "out"
    older = store.Run.start(out, folder, 1, {"timeout": 0.5})
    older.mark("interrupted")
    older.close()
    newer = store.Run.start(out, folder, 2, {"timeout": 0.5})
    newer.mark("interrupted")
    newer.close()
    done = qkv_grade(str(folder), "--out", str(out), "--resume", *FAST)
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "latest" / "run.json").read_text())["seed"] == 2
    again = qkv_grade(str(folder), "--out", str(out), "--resume", *FAST)
    assert again.returncode == 2 and "to resume (its latest" in again.stderr, again.stderr
    assert json.loads((out / "latest" / "run.json").read_text())["seed"] == 2


def _text_grades(stdout: str) -> dict[str, str]:
    return {line.split()[0]: line.split()[1] for line in stdout.splitlines() if " / " in line}


def test_a_full_disk_prints_every_grade_leaves_no_partial_file_and_exits_3(tmp_path):
    folder = _copy_class(tmp_path, copies=50)  # 300 submissions
    with small_disk(tmp_path / "disk", "64k") as disk:
        done = qkv_grade(str(folder), "--out", str(disk / "results"), "--seed", "3", *FAST)
        files = [path for path in disk.rglob("*") if path.is_file()]
        documents = []
        for path in files:
            if path.suffix == ".json":
                documents.append(json.loads(path.read_text(encoding="utf-8")))  # each one whole
    assert done.returncode == 3, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert "could not write the results (No space left on device)" in done.stderr
    assert len(_text_grades(done.stdout)) == 300
    assert not [path for path in files if path.name.startswith(".") or path.name == "summary.csv"]
    assert [path.parent.name.endswith(INCOMPLETE) for path in files] == [True] * len(files)
    results = [document for document in documents if "steps" in document]
    assert results and len(results) < 300
    grades = _text_grades(done.stdout)
    assert all(f"{document['score']:g}" == grades[document["submission"]] for document in results)


def test_a_temporary_folder_that_fills_up_mid_run_loses_no_grade(tmp_path):
    """The run keeps its results' texts in a temporary file until it prints them; where TMPDIR fills
    up mid-run, they are kept in memory instead, the texts already in the file too: every grade is
    printed and the summary written, as with room to spare."""
    folder = _copy_class(tmp_path, copies=2)  # 12 submissions, some 40 KB of results
    clean = qkv_grade(str(folder), "--out", str(tmp_path / "clean"), "--seed", "3", *FAST)
    with small_disk(tmp_path / "tmp", "16k") as small:
        done = qkv_grade(str(folder), "--out", str(tmp_path / "out"), "--seed", "3", *FAST, env={"TMPDIR": str(small)})
    assert done.returncode == clean.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert _text_grades(done.stdout) == _text_grades(clean.stdout) and len(_text_grades(done.stdout)) == 12
    assert (tmp_path / "out" / "latest" / "summary.csv").read_text() == (tmp_path / "clean" / "latest" / "summary.csv").read_text()


@pytest.mark.parametrize("what", ["folder", "file"])
def test_grades_that_cannot_be_printed_get_one_line_and_status_3(tmp_path, what):
    """Standard output on a full disk (`> grades.txt` beside a full --out, here /dev/full): one line
    says so, with status 3, never a traceback; a folder's run is finished and holds every result."""
    folder = _copy_class(tmp_path, copies=1)
    target = folder if what == "folder" else next(folder.glob("*.py"))
    with open("/dev/full", "w") as full:
        out = ("--out", str(tmp_path / "out")) if what == "folder" else ()
        done = subprocess.run([sys.executable, "-m", "autograder.cli", str(target), *out, "--seed", "3", *FAST],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "(No space left on device)" in done.stderr
    if what == "folder":
        assert "every result is kept in" in done.stderr
        saved = [path for path in (tmp_path / "out" / "latest").glob("*.json") if path.name != "run.json"]
        assert len(saved) == len(list(folder.glob("*.py"))) and (tmp_path / "out" / "latest" / "summary.csv").exists()


@pytest.mark.parametrize("where", ["read-only", "under a file"])
def test_an_out_folder_that_cannot_be_written_gets_one_line_and_status_3(tmp_path, where):
    folder = _copy_class(tmp_path, copies=1)
    if where == "read-only":
        out = tmp_path / "out"
        out.mkdir()
        with read_only(out):
            done = qkv_grade(str(folder), "--out", str(out), *FAST)
    else:
        (tmp_path / "file").write_text("")
        out = tmp_path / "file" / "out"
        done = qkv_grade(str(folder), "--out", str(out), *FAST)
    assert done.returncode == 3, done.stderr
    assert done.stderr.count("\n") == 1 and "cannot write the results there" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_grade_cut_short_by_an_interrupt_is_neither_printed_nor_saved(tmp_path):
    """On Ctrl-C the run stops taking grades before it ends its workers: a submission those
    workers were still running comes back broken ('the grading worker died'), and must not be
    printed or saved as its grade. The grades taken before are still written."""
    from autograder.cli import _Saver
    from autograder.results import unreadable
    from autograder.store import Run

    (tmp_path / "class").mkdir()
    run = Run.start(tmp_path / "out", tmp_path / "class", 1, {"timeout": 1.0})
    saver = _Saver(run, 2)
    saver.add(unreadable("before.py", "graded before the interrupt", 1, "none"))
    saver.stop()
    saver.add(unreadable("after.py", "cut short by the interrupt", 1, "none"))
    saver.close()
    run.close()
    assert "before.py" in saver.spool and "after.py" not in saver.spool
    assert (run.folder / result_file("before.py")).exists()
    assert not (run.folder / result_file("after.py")).exists()


def test_latest_left_on_an_older_run_by_a_kill_is_mended_by_the_next_run(tmp_path):
    """A run killed after its folder was finished but before `latest` was switched leaves `latest`
    on the run before it, and its half-made link: the next qkv-grade in that --out, even a
    --resume with nothing to do, points `latest` at the newest finished run and removes the link."""
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "a.py").write_text(reference_source())
    out = tmp_path / "out"
    for _ in range(2):
        done = qkv_grade(str(folder), "--out", str(out), "--seed", "3", *FAST)
        assert done.returncode == 0, done.stderr
        time.sleep(1.1)  # run folders are named by the second
    older, newer = runs(out)
    (out / "latest").unlink()
    (out / "latest").symlink_to(older.name)  # as the kill left it
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (out / f".latest.{dead.pid}.tmp").symlink_to(newer.name)
    done = qkv_grade(str(folder), "--out", str(out), "--resume")
    assert done.returncode == 2 and "is finished" in done.stderr
    assert (out / "latest").readlink() == Path(newer.name)
    assert not list(out.glob(".latest.*"))
    (out / "latest").unlink()
    (out / "latest").symlink_to(older.name)
    done = qkv_grade(str(folder), "--out", str(out), "--seed", "3", *FAST)
    assert done.returncode == 0, done.stderr
    assert (out / "latest").readlink() == Path(runs(out)[-1].name)


def test_latest_never_points_at_a_run_someone_else_put_in_the_results_folder(tmp_path):
    """A results folder others may write (a shared drop folder graded in place): a run folder of
    theirs, with a manifest finished far in the future and a summary of full marks, is never the
    one `latest` shows; the run just finished is."""
    import os
    import shutil

    if os.geteuid() != 0:
        pytest.skip("making a folder another user owns needs root")
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "a.py").write_text(reference_source())
    out = tmp_path / "out"
    done = qkv_grade(str(folder), "--out", str(out), "--seed", "3", *FAST)
    assert done.returncode == 0, done.stderr
    planted = out / "run-29991231-235959-seed1"
    shutil.copytree(runs(out)[-1], planted)
    manifest = json.loads((planted / "run.json").read_text())
    (planted / "run.json").write_text(json.dumps({**manifest, "finished": 9e12}))
    (planted / "summary.csv").write_text("submission,score,max\nmallory.py,100,100\n")
    for path in [planted, *planted.iterdir()]:
        os.lchown(path, 65534, 65534)
    time.sleep(1.1)
    done = qkv_grade(str(folder), "--out", str(out), "--seed", "3", *FAST)
    assert done.returncode == 0, done.stderr
    assert (out / "latest").readlink() != Path(planted.name)
    assert (out / "latest").readlink() == Path(max((r for r in runs(out) if r != planted), key=lambda r: r.name).name)


def _one_student_and_a_folder_anyone_may_write(tmp_path):
    """A class of one correct submission, and a shared drop folder (mode 777, not sticky)."""
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "a.py").write_text(reference_source())
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    return folder, shared


def test_a_results_or_report_folder_others_may_write_is_refused_and_a_link_in_it_never_written_through(tmp_path):
    """In a folder a classmate may write they could swap the run folder for a link, plant a run to
    resume or pin `latest`: qkv-grade names the problem and writes nothing there. A link planted
    in the report folder (scores.csv -> a file of the instructor's) is replaced, never written
    through."""
    import os
    import stat

    from autograder.cli import EXIT_UNWRITTEN

    folder, shared = _one_student_and_a_folder_anyone_may_write(tmp_path)
    done = qkv_grade(str(folder), "--out", str(shared), "--seed", "3", *FAST)
    assert done.returncode == EXIT_UNWRITTEN and "others may write in the results folder" in done.stderr, done.stderr
    assert list(shared.iterdir()) == []
    done = qkv_grade(str(folder), "--out", str(tmp_path / "out"), "--report", str(shared), "--seed", "3", *FAST)
    assert done.returncode == EXIT_UNWRITTEN and "others may write in the report folder" in done.stderr, done.stderr
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir(mode=0o755)
        os.chown(theirs, 65534, 65534)
        done = qkv_grade(str(folder), "--out", str(theirs), "--seed", "3", *FAST)
        assert done.returncode == EXIT_UNWRITTEN and "belongs to another user" in done.stderr, done.stderr
    report = tmp_path / "report"
    report.mkdir(mode=0o700)
    keys = tmp_path / "authorized_keys"
    keys.write_text("ssh-ed25519 AAAA instructor\n")
    (report / "scores.csv").symlink_to(keys)
    done = qkv_grade(str(folder), "--out", str(tmp_path / "out"), "--report", str(report), "--seed", "3", *FAST)
    if done.returncode == 0:  # the report needs matplotlib (the report extra)
        assert keys.read_text() == "ssh-ed25519 AAAA instructor\n"
        assert stat.S_ISREG(os.lstat(report / "scores.csv").st_mode)
    else:
        assert "matplotlib" in done.stderr, done.stderr
    assert stat.S_IMODE((tmp_path / "out").stat().st_mode) == 0o700  # made here: yours alone


def test_a_results_or_report_folder_inside_a_folder_others_may_write_is_refused_before_anything_is_written(tmp_path):
    """Inside a shared drop folder a classmate may rename the results folder away and put a link in
    its place after it was checked, so that every later write (as root, perhaps) lands where they
    chose. A folder on the way that others may write, named or reached through a link, is refused
    before anything is made there; one with the sticky bit (as /tmp), where only an entry's owner
    may rename it, is not."""
    from autograder.cli import EXIT_UNWRITTEN

    folder, drop = _one_student_and_a_folder_anyone_may_write(tmp_path)
    out = drop / "out"
    out.mkdir(mode=0o700)
    (tmp_path / "via").symlink_to(out)
    for args in (("--out", str(out)), ("--out", str(tmp_path / "via")), ("--out", str(drop / "new" / "out")),
                 ("--out", str(tmp_path / "mine"), "--report", str(drop / "report"))):
        done = qkv_grade(str(folder), *args, "--seed", "3", *FAST)
        assert done.returncode == EXIT_UNWRITTEN, (args, done.stderr)
        assert f"others may write in {drop} (mode 777)" in done.stderr and "put a link" in done.stderr, done.stderr
    done = qkv_grade(str(folder), "--seed", "3", *FAST, cwd=drop)  # started there: ./qkv-results
    assert done.returncode == EXIT_UNWRITTEN and f"others may write in {drop}" in done.stderr, done.stderr
    assert sorted(path.name for path in drop.iterdir()) == ["out"] and list(out.iterdir()) == []
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    done = qkv_grade(str(folder), "--out", str(sticky / "out"), "--seed", "3", *FAST)
    assert done.returncode == 0, done.stderr


def test_a_folder_whose_access_control_list_lets_others_write_is_refused(tmp_path):
    """A named user's entry in a folder's access control list shows in its mode only as the group
    bits (the list's mask): a folder above the results folder, or the results folder itself (made
    inside a folder whose default list it inherits), that someone else may write through such an
    entry is refused like one whose mode says so."""
    import os

    from autograder.cli import EXIT_UNWRITTEN

    def acl(path, tag, name="system.posix_acl_access"):  # user::rwx user:65534:rwx group::r-x mask::rwx other::r-x
        entries = [(0x01, 7, 0xFFFFFFFF), (0x02, 7, 65534), (0x04, 5, 0xFFFFFFFF), (0x10, 7, 0xFFFFFFFF),
                   (0x20, 5, 0xFFFFFFFF)]
        data = (2).to_bytes(4, "little") + b"".join(t.to_bytes(2, "little") + p.to_bytes(2, "little")
                                                    + i.to_bytes(4, "little") for t, p, i in entries)
        try:
            os.setxattr(path, name, data)
        except OSError as exc:
            pytest.skip(f"this file system keeps no access control lists here: {exc}")

    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "a.py").write_text(reference_source())
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    acl(shared, "access")
    done = qkv_grade(str(folder), "--out", str(shared / "results"), "--seed", "3", *FAST)
    assert done.returncode == EXIT_UNWRITTEN and f"{shared} has an access control list" in done.stderr, done.stderr
    inherits = tmp_path / "inherits"
    inherits.mkdir(mode=0o755)
    acl(inherits, "default", "system.posix_acl_default")
    done = qkv_grade(str(folder), "--out", str(inherits / "results"), "--seed", "3", *FAST)
    assert done.returncode == EXIT_UNWRITTEN and "has an access control list" in done.stderr, done.stderr


def test_a_student_folder_of_thousands_of_files_costs_a_few_parses_and_a_few_lines(tmp_path, monkeypatch):
    """Whether a module is the untouched starter (a parse each) is asked only in the folder of a
    student's that can be graded; the files not graded are listed up to a bound, then counted."""
    from autograder import submission

    folder = tmp_path / "class"
    (folder / "ann").mkdir(parents=True)
    (folder / "ann" / "attention_head.py").write_text(reference_source())
    starter = (REPO / "assignments" / "attention_head" / "attention_head.py").read_text()
    for n in range(60):  # pairs at the top of the folder, and pairs in sixty folders below it
        (folder / "mal" / f"c{n:02d}").mkdir(parents=True)
        for place in (folder / "mal", folder / "mal" / f"c{n:02d}"):
            stem = f"x{n:02d}" if place.name == "mal" else "attention_head"
            (place / f"{stem}.py").write_text(starter)
            (place / f"{stem}.ipynb").write_text("{}")
    asked = []
    real = submission.untouched_starter
    monkeypatch.setattr(submission, "untouched_starter", lambda path, name=None: asked.append(name) or real(path, name))
    found = submission.discover(folder)
    assert asked == ["mal/c00/attention_head.py"], asked
    assert [name for _, name in found.items] == ["ann/attention_head.py", "mal/c00/attention_head.ipynb"]
    listed = [name for name, _ in found.skipped]
    assert len(listed) == submission.MOST_SKIPPED_LISTED + 1 and listed[-1] == "mal/…", listed
    more = 4 * 60 - 1 - submission.MOST_SKIPPED_LISTED  # every file of mal's but the one graded
    assert found.skipped[-1][1] == f"{more} more files in this student's folder"


def test_a_walk_past_a_student_s_bound_or_the_bound_in_all_says_so_and_costs_no_classmate_a_grade(tmp_path,
                                                                                                      monkeypatch):
    """Of a student's folder only MOST_ENTRIES files and folders are looked at, and only
    MOST_ENTRIES_IN_ALL outside the students' folders: past a bound, one line says so, in a class's
    folder as in a course's, and whatever came before it is found as ever; a student's folder
    at its bound is walked whole, and no student's folder draws on the other bound. (Both bounds lowered here; test_intake runs qkv-grade on a
    student's folder past the real one.)"""
    import os

    from autograder import submission

    def fill(folder: Path, count: int) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for number in range(count):
            os.close(os.open(folder / f"f{number:03d}.py", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))

    monkeypatch.setattr(submission, "MOST_ENTRIES", 40)
    class_, course = tmp_path / "class", tmp_path / "course"
    for place in (class_ / "ann", class_ / "mal" / "ps1", class_ / "nia", course / "submitted" / "bob" / "ps1",
                  course / "submitted" / "mal" / "ps1"):
        place.mkdir(parents=True)
        (place / "attention_head.py").write_text(reference_source())
    (class_ / "zed.py").write_text(reference_source())
    (course / "nbgrader_config.py").write_text("c = get_config()\n")
    fill(class_ / "mal" / "zz", 100)  # after ps1/ by name: mal's submission is looked at first
    fill(course / "submitted" / "mal" / "zz", 100)
    fill(class_ / "nia", 39)  # with her submission, 40: her bound exactly
    import pwd

    me = f"{pwd.getpwuid(os.getuid()).pw_name} (uid {os.getuid()})"  # a student's bound counts each account apart
    cut = (f"more than 40 files and folders made by {me}: only the first 40 were looked at, and the rest were "
           "neither graded nor listed")

    found = submission.discover(class_)
    assert [name for _, name in found.items] == ["ann/attention_head.py", "mal/ps1/attention_head.py",
                                                 "nia/attention_head.py", "zed.py"]
    listed = dict(found.skipped)
    assert listed.pop("mal/…") == f"this student's folder holds {cut}"
    assert len(listed) == 37 + 39 and all(name.startswith(("mal/zz/f", "nia/f")) for name in listed), listed
    found = submission.discover(course)
    assert [name for _, name in found.items] == ["submitted/bob/ps1/attention_head.py",
                                                 "submitted/mal/ps1/attention_head.py"]
    assert dict(found.skipped)["submitted/mal/…"] == f"this student's folder holds {cut}"

    # a student's folder draws on its own bound alone: however full mal's, nia's and zed's are looked at
    monkeypatch.setattr(submission, "MOST_ENTRIES_IN_ALL", 4)  # the folder graded's own four entries
    found = submission.discover(class_)
    assert [name for _, name in found.items] == ["ann/attention_head.py", "mal/ps1/attention_head.py",
                                                 "nia/attention_head.py", "zed.py"]
    assert not any(name == "…" for name, _ in found.skipped)
    # past the bound of what lies outside the students' folders: three of the folder graded's four entries
    monkeypatch.setattr(submission, "MOST_ENTRIES_IN_ALL", 3)
    found = submission.discover(class_)
    assert len(found.items) == 3
    assert found.skipped[-1] == ("…", "the folder graded holds more than 3 files and folders: only the first 3 "
                                      "were looked at, and the rest were neither graded nor listed")


def test_files_that_are_no_submission_in_a_shared_drop_folder_use_up_no_classmate_s_place(tmp_path, monkeypatch):
    """In a flat drop folder the class writes, the bound outside the students' folders is shared by
    everyone: a classmate's thousands of empty files there, listed in the file system's order, left
    others' submissions out. Files that can be nothing graded (and links not named as a submission,
    the first few of which are listed) are read past uncounted, up to a bound of their own, past which
    one line says the rest of the listing was not read."""
    from autograder import submission

    class_ = tmp_path / "class"
    class_.mkdir()
    for name in ("ann", "bob", "cleo", "dan"):
        (class_ / f"{name}.py").write_text(reference_source())
    def flood(folder: Path) -> None:  # empty files, and links to nowhere, which cost as little
        for number in range(300):
            (folder / f"z{number:04d}").touch()
            (folder / f"y{number:04d}").symlink_to(folder / "nowhere")

    flood(class_)
    monkeypatch.setattr(submission, "MOST_ENTRIES_IN_ALL", 5)
    monkeypatch.setattr(submission, "MOST_LINKS_SHOWN", 3)
    found = submission.discover(class_)
    assert [name for _, name in found.items] == ["ann.py", "bob.py", "cleo.py", "dan.py"]
    assert [why for _, why in found.skipped] == ["a symbolic link: not followed"] * 3, found.skipped
    # and in a student's own folder, which a classmate may write too
    (class_ / "eve").mkdir()
    (class_ / "eve" / "attention_head.py").write_text(reference_source())
    flood(class_ / "eve")
    monkeypatch.setattr(submission, "MOST_ENTRIES", 40)
    found = submission.discover(class_)
    assert [name for _, name in found.items] == ["ann.py", "bob.py", "cleo.py", "dan.py", "eve/attention_head.py"]
    assert [why for _, why in found.skipped] == ["a symbolic link: not followed"] * 6, found.skipped
    monkeypatch.setattr(submission, "MOST_PASSED_OVER", 10)
    found = submission.discover(class_)
    assert ("…", "the folder graded holds more than 10 files that are no submission: the rest of this folder's "
                 "listing was not read, and what it holds was neither graded nor listed") in found.skipped, found.skipped


def test_a_student_folder_named_like_a_course_folder_is_one_student(tmp_path):
    """A drop folder is a course's root only where it holds a course's files (nbgrader_config.py,
    gradebook.db, qkv_course.json) beside submitted/ or autograded/, and no submission outside
    nbgrader's own folders; never because a folder is named `submitted` or `autograded`: a student
    who names their folder so, with classmates' names inside, is still one student, even with a
    classmate handing in a course's file beside it. From a course's root, the folders beside those
    two (the instructor's source/, release/) hold no student."""
    wrong = variant(NO_SCALING)
    class_ = tmp_path / "class"
    (class_ / "bob").mkdir(parents=True)
    (class_ / "bob" / "attention_head.py").write_text(wrong)
    for folder in ("submitted", "autograded"):
        for name in ("bob", "carol"):
            (class_ / folder / name / "ps1").mkdir(parents=True)
            (class_ / folder / name / "ps1" / "attention_head.py").write_text(reference_source())
    course = tmp_path / "course"
    for folder in ("submitted/bob/ps1", "source/ps1", "release/ps1"):
        (course / folder).mkdir(parents=True)
        (course / folder / "attention_head.py").write_text(reference_source())
    results = {}
    for graded in (class_, course):
        out = tmp_path / f"out-{graded.name}"
        done = qkv_grade(str(graded), "--out", str(out), "--seed", "4", "--format", "json", *FAST)
        assert done.returncode == 0, done.stderr
        rows = {row["submission"]: row for row in csv.DictReader((out / "latest" / "summary.csv").open())}
        results[graded.name] = ({result["submission"] for result in json.loads(done.stdout)},
                                {name: row["skipped"] for name, row in rows.items() if row["skipped"]})
    graded, skipped = results["class"]
    assert graded == {"bob/attention_head.py", "autograded/bob/ps1/attention_head.py",
                      "submitted/bob/ps1/attention_head.py"}
    assert set(skipped) == {"submitted/carol/ps1/attention_head.py", "autograded/carol/ps1/attention_head.py"}
    assert all("not a course's root" in reason for reason in skipped.values())
    # the same folder with a course's file handed in too (two students together): while a submission
    # lies outside nbgrader's own folders (bob/), it is no course's root
    (class_ / "gradebook.db").write_bytes(b"")
    done = qkv_grade(str(class_), "--out", str(tmp_path / "out-marked"), "--seed", "4", "--format", "json", *FAST)
    assert {result["submission"] for result in json.loads(done.stdout)} == graded
    # files handed in side by side: one named like a course's, and a folder submitted/ with made-up
    # classmates, make no course's root while anyone's file lies beside them
    flat = tmp_path / "flat"
    (flat / "submitted" / "zed" / "ps1").mkdir(parents=True)
    (flat / "submitted" / "zoe" / "ps1").mkdir(parents=True)
    for name in ("ann.py", "nbgrader_config.py", "submitted/zed/ps1/attention_head.py",
                 "submitted/zoe/ps1/attention_head.py"):
        (flat / name).write_text(reference_source())
    done = qkv_grade(str(flat), "--out", str(tmp_path / "out-flat"), "--seed", "4", "--format", "json", *FAST)
    assert [result["submission"] for result in json.loads(done.stdout)] == ["ann.py",
                                                                           "submitted/zed/ps1/attention_head.py"]
    assert "not graded: nbgrader_config.py: a helper or test file" in done.stderr
    # a course's root: its file beside submitted/ and autograded/, nothing graded elsewhere but in
    # nbgrader's own folders (whose source/ and release/ are the instructor's)
    (course / "autograded" / "bob" / "ps1").mkdir(parents=True)
    (course / "autograded" / "bob" / "ps1" / "attention_head.py").write_text(wrong)
    (course / "nbgrader_config.py").write_text("c = get_config()\n")
    done = qkv_grade(str(course), "--out", str(tmp_path / "out-course"), "--seed", "4", "--format", "json", *FAST)
    assert [result["submission"] for result in json.loads(done.stdout)] == [
        "autograded/bob/ps1/attention_head.py", "submitted/bob/ps1/attention_head.py"]
    for folder in ("source", "release"):
        assert f"not graded: {folder}/ps1/attention_head.py: in a course's root only submitted/" in done.stderr


def test_a_classmate_s_course_files_and_flood_make_no_course_s_root(tmp_path, monkeypatch):
    """In a drop folder the class may write, a classmate drops `gradebook.db` and a `submitted/` of
    their own, and floods each classmate's folder with empty files, so that the walk for a
    submission outside nbgrader's folders stops before it: the folder became a course's root, where
    only the classmate's `submitted/` was graded. A course's files count only as the folder's own
    account's, and that walk passes over what can be nothing graded, as discover's does."""
    from autograder import submission

    monkeypatch.setattr(submission, "MOST_ENTRIES", 5)
    drop = tmp_path / "drop"
    (drop / "bob").mkdir(parents=True)
    (drop / "bob" / "attention_head.py").write_text("import numpy as np\n")
    for number in range(40):  # empty files that can be nothing graded, most before bob's in any order
        (drop / "bob" / f"junk{number}").write_bytes(b"")
    (drop / "submitted" / "mallory" / "ps1").mkdir(parents=True)
    (drop / "submitted" / "mallory" / "ps1" / "attention_head.py").write_text("import numpy as np\n")
    (drop / "gradebook.db").write_bytes(b"")
    assert [name for _, name in submission.discover(drop).items] == [
        "bob/attention_head.py", "submitted/mallory/ps1/attention_head.py"]
    if os.geteuid() != 0:
        return
    (drop / "bob" / "attention_head.py").unlink()  # bob's work not handed in yet: the marks alone
    for path in (drop / "gradebook.db", drop / "submitted"):
        os.chown(path, 54_321, 54_321)
    assert [name for _, name in submission.discover(drop).items] == ["submitted/mallory/ps1/attention_head.py"]
    assert not submission._course_root(drop)
    for path in (drop / "gradebook.db", drop / "submitted"):
        os.chown(path, os.getuid(), os.getgid())
    assert submission._course_root(drop)  # the instructor's own course files make it one


def test_a_module_another_account_puts_beside_a_notebook_displaces_nothing(tmp_path):
    """In a drop folder the class may write (sticky, so no one removes another's file), mallory puts
    `ada.py` beside ada's `ada.ipynb`: the module beside a notebook is graded in its place only where
    both are the same account's. In a student's folder, the owner's file is graded, never another's."""
    from autograder import submission

    class_ = tmp_path / "drop"
    class_.mkdir()
    (class_ / "ada.ipynb").write_text("{}")
    (class_ / "ada.py").write_text("import numpy as np\n")
    found = submission.discover(class_)  # one account's two files: the module is the work
    assert [name for _, name in found.items] == ["ada.py"]
    assert dict(found.skipped) == {"ada.ipynb": "ada.py beside it is graded instead"}
    if os.geteuid() != 0:
        pytest.skip("giving a file to another account needs root")
    os.chown(class_ / "ada.py", 54_321, 54_321)
    found = submission.discover(class_)
    assert sorted(name for _, name in found.items) == ["ada.ipynb", "ada.py"]
    assert not found.skipped
    # in a student's folder, a file of another account's beside the owner's, or one folder above it,
    # is not graded in the student's name
    (class_ / "ada.py").unlink()
    (class_ / "ada.ipynb").unlink()
    (class_ / "bo" / "ps1").mkdir(parents=True)
    (class_ / "bo" / "ps1" / "attention_head.py").write_text("import numpy as np\n")
    for planted in (class_ / "bo" / "ps1" / "attention_head.ipynb", class_ / "bo" / "attention_head.py"):
        planted.write_text("{}")
        os.chown(planted, 54_321, 54_321)
    found = submission.discover(class_)
    assert [name for _, name in found.items] == ["bo/ps1/attention_head.py"]
    assert dict(found.skipped) == dict.fromkeys(
        ["bo/attention_head.py", "bo/ps1/attention_head.ipynb"],
        "made by uid 54321, not by root (uid 0) (the account that made the folder), whose own file is graded")
    # in a folder the instructor made for a student, which the class may write, no owner tells:
    # a classmate's notebook (first by name) beside the student's module takes nothing's place
    cy = class_ / "cy"
    cy.mkdir()
    os.chmod(cy, 0o1777)
    (cy / "attention_head.py").write_text("import numpy as np\n")
    os.chown(cy / "attention_head.py", 54_322, 54_322)
    (cy / "attention_head.ipynb").write_text("{}")
    os.chown(cy / "attention_head.ipynb", 54_321, 54_321)
    (cy / "old").mkdir()
    (cy / "old" / "attention_head.py").write_text("import numpy as np\n")
    os.chown(cy / "old" / "attention_head.py", 54_322, 54_322)
    found = submission.discover(class_)
    assert [name for _, name in found.items] == ["bo/ps1/attention_head.py", "cy/attention_head.ipynb",
                                                  "cy/attention_head.py"]
    assert dict(found.skipped)["cy/old/attention_head.py"] == (
        "cy/attention_head.py is graded: one submission per student folder (cy/)")
    assert found.notes == ["cy/attention_head.ipynb, cy/attention_head.py: names a reader could take for one "
                           "student's, each graded apart under its own name; made by different accounts "
                           "(cy/attention_head.ipynb: uid 54321, cy/attention_head.py: uid 54322)"]
    # nor does one in a folder that sorts first decide which of the student's own is looked at: dee
    # hands in the released folder, the starter untouched beside the notebook she worked in
    dee = class_ / "dee"
    (dee / "attention_head").mkdir(parents=True)
    os.chmod(dee, 0o1777)
    shutil.copy(REPO / "assignments" / "attention_head" / "attention_head.py", dee / "attention_head")
    (dee / "attention_head" / "attention_head.ipynb").write_text("{}")
    (dee / "a").mkdir()
    (dee / "a" / "attention_head.ipynb").write_text("{}")
    for path in (dee / "attention_head", dee / "attention_head" / "attention_head.py",
                 dee / "attention_head" / "attention_head.ipynb"):
        os.chown(path, 54_322, 54_322)
    for path in (dee / "a", dee / "a" / "attention_head.ipynb"):
        os.chown(path, 54_321, 54_321)
    found = submission.discover(class_)
    assert [name for _, name in found.items if name.startswith("dee/")] == [
        "dee/a/attention_head.ipynb", "dee/attention_head/attention_head.ipynb"]
    assert dict(found.skipped)["dee/attention_head/attention_head.py"] == (
        "the starter module, untouched: attention_head.ipynb beside it is graded instead")


def test_names_that_cost_nothing_in_a_shared_drop_folder_use_up_no_classmate_s_place(tmp_path, monkeypatch):
    """In a flat drop folder the bound of what is looked at is the whole class's: a classmate's
    million empty files named `x.py`, names of one file (hard links, which take no room), dangling
    links or named pipes, read first in the file system's order, left classmates out, and each was graded as a student. Such
    names are uncounted, the first few listed with why they are not graded."""
    from autograder import submission

    monkeypatch.setattr(submission, "MOST_ENTRIES_IN_ALL", 5)
    monkeypatch.setattr(submission, "MOST_LINKS_SHOWN", 3)
    drop = tmp_path / "drop"
    drop.mkdir()
    for name in ("ann", "bob"):
        (drop / f"{name}.py").write_text(reference_source())
    (tmp_path / "one.py").write_text("x = 1\n")
    for number in range(30):
        (drop / f"e{number:02d}.py").write_bytes(b"")
        os.link(tmp_path / "one.py", drop / f"h{number:02d}.py")
        (drop / f"l{number:02d}.py").symlink_to(f"nowhere{number}")  # dangling: an inode, no data
        os.mkfifo(drop / f"p{number:02d}.ipynb")
    found = submission.discover(drop)
    assert [name for _, name in found.items] == ["ann.py", "bob.py"]
    reasons = dict(found.skipped)
    assert len(reasons) <= 3 and set(reasons.values()) <= {
        "an empty file: nothing to grade",
        "a file with more than one name (a hard link): not graded; hand in a file of its own",
        "a symbolic link: not followed, so nothing to grade; hand in the file itself",
        "not a regular file (a named pipe, a socket or a device): nothing to grade"}, reasons


def test_a_classmate_s_flood_in_a_student_s_folder_uses_up_their_own_share_of_its_bound(tmp_path, monkeypatch):
    """A student's folder the class may write, filled by a classmate with files named to count
    (`f0.py`) and empty folders, past the folder's bound: the bound counts each account's entries
    apart, so whatever the file system's order, the student's own module is still graded."""
    from autograder import submission

    if os.geteuid() != 0:
        pytest.skip("giving files to other accounts needs root")
    monkeypatch.setattr(submission, "MOST_ENTRIES", 20)
    bob = tmp_path / "drop" / "bob"
    bob.mkdir(parents=True)
    os.chmod(bob, 0o1777)
    (bob / "attention_head.py").write_text("import numpy as np\n")
    os.chown(bob / "attention_head.py", 54_322, 54_322)
    for number in range(60):
        made = bob / (f"f{number}.py" if number % 2 else f"d{number}")
        made.mkdir() if number % 2 == 0 else made.write_text("")
        os.chown(made, 54_321, 54_321)
    found = submission.discover(tmp_path / "drop")
    assert [name for _, name in found.items] == ["bob/attention_head.py"]
    reasons = dict(found.skipped)
    assert reasons["bob/…"] == ("this student's folder holds more than 20 files and folders made by uid 54321: only "
                                "the first 20 were looked at, and the rest were neither graded nor listed"), reasons
    assert 0 < sum(1 for name in reasons if name.startswith("bob/f")) <= 20  # those files of its first 20


# Names a reader takes for one another: a letter of another script drawn as a Latin one, a name
# decomposed as a Mac writes it, a compatibility form; each shows apart from the name it imitates.
def _look_alike_variants(name: str):
    import unicodedata

    from autograder.results import LOOK_ALIKES

    passes_for: dict[str, list[str]] = {}
    for char, latin in LOOK_ALIKES.items():
        passes_for.setdefault(latin, []).append(char)
    stem, suffix = name.rsplit(".", 1)
    for index, letter in enumerate(stem):  # one letter, then the whole word, in another script
        for char in passes_for.get(letter.lower(), []):
            yield stem[:index] + char + stem[index + 1:] + "." + suffix
    whole = [passes_for.get(letter.lower(), [None])[0] for letter in stem]
    if all(whole):
        yield "".join(whole) + "." + suffix
    yield unicodedata.normalize("NFD", name) if not name.isascii() else name.replace("e", "e\u0301", 1)
    yield "".join(chr(ord(char) + 0xFEE0) if char.isalnum() and char.isascii() else char for char in stem) + "." + suffix


@pytest.mark.parametrize("name", ["ada.py", "cooper.ipynb", "josé.py", "jones.py", "bob.py", "x.py"])
def test_a_name_that_looks_like_another_is_shown_apart(name):
    from autograder.results import look, printable_name

    variants = {variant for variant in _look_alike_variants(name) if variant != name}
    assert variants
    for variant in variants:
        assert look(variant) == look(name), ascii(variant)  # what the notes group by
        assert printable_name(variant) != printable_name(name), ascii(variant)
        assert printable_name(variant).isascii() or not name.isascii(), ascii(variant)
    # names written in one script, as a keyboard types them, show as they are
    for plain in ["josé.py", "иван.py", "Алексей.py", "田中.py", "naïve.ipynb", "Ἀθηνᾶ.py", "Zoë-O'Neil.py", "yıldız.py"]:
        assert printable_name(plain) == plain


def test_look_alike_names_are_told_in_the_listing_and_the_summary(tmp_path):
    folder, out = tmp_path / "class", tmp_path / "out"
    folder.mkdir()
    starter = (REPO / "assignments" / "attention_head" / "attention_head.py").read_text()
    for name, source in (("ada.py", reference_source()), ("\u0430da.py", starter),  # Cyrillic а
                         ("jos\u00e9.py", reference_source()), ("jose\u0301.py", starter),
                         ("alice.py", reference_source()), ("bob.py", reference_source())):
        (folder / name).write_text(source)
    shutil.copy(REPO / "assignments" / "attention_head" / "attention_head.ipynb", folder / "alice.ipynb")
    other = os.geteuid() == 0
    if other:  # a classmate's account made the notebook named for alice
        os.chown(folder / "alice.ipynb", 65534, 65534)
    done = qkv_grade(str(folder), "--out", str(out), "--seed", "4", *FAST)
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1] for line in done.stdout.splitlines() if "/ 100" in line}
    assert rows == {"ada.py": "100", "\\u0430da.py": "0", "jos\u00e9.py": "100", "jose\\u0301.py": "0",
                    "alice.py": "100", "alice.ipynb": "0", "bob.py": "100"}
    notes = [line for line in done.stdout.splitlines() if line.startswith("note: ")]
    groups = ["note: ada.py, \\u0430da.py", "note: alice.ipynb, alice.py", "note: jose\\u0301.py, jos\u00e9.py"]
    if other:  # a group made by different accounts is told first
        groups.insert(0, groups.pop(1))
    assert [note.split(": names")[0] for note in notes] == groups
    alice = next(note for note in notes if note.startswith("note: alice"))
    assert ("made by different accounts (alice.ipynb: " in alice and "(uid 65534), alice.py: " in alice) == other
    with open(out / "latest" / "summary.csv", newline="", encoding="utf-8") as table:
        shown = [row["submission"] for row in csv.DictReader(table)]
    assert sorted(shown) == sorted(rows)
    done = qkv_grade(str(folder), "--format", "json", "--seed", "4", *FAST)
    assert sorted(json.loads(done.stdout), key=lambda doc: doc["submission"])[0]["submission"] == "ada.py"
    assert {doc["submission"] for doc in json.loads(done.stdout)} >= {"\u0430da.py", "jose\u0301.py"}  # the true names
    assert [line for line in done.stderr.splitlines() if line.startswith("qkv-grade: note: ")] == \
        ["qkv-grade: " + note for note in notes]


def test_one_account_s_many_submissions_in_a_drop_folder_are_graded_up_to_a_few_and_listed(tmp_path, monkeypatch):
    """Every bound a submission meets is its own; this one is its maker's. A classmate's thousand
    copies of a module that runs just under every limit, named to sort first, held the class's run
    for hours: past MOST_PER_ACCOUNT an account's submissions are listed, not graded. The account
    grading, root and the folder's owner have none: a whole class's folder is the instructor's."""
    from autograder import submission

    if os.geteuid() != 0:
        pytest.skip("giving files to other accounts needs root")
    drop = tmp_path / "drop"
    drop.mkdir()
    os.chmod(drop, 0o1777)
    for number in range(8):  # mallory's copies, and folders of one student each, named to sort first
        (drop / f"0-{number:02d}.py").write_text(reference_source())
        os.chown(drop / f"0-{number:02d}.py", 54_323, 54_323)
    (drop / "00" / "attention_head.py").parent.mkdir()
    (drop / "00" / "attention_head.py").write_text(reference_source())
    for path in (drop / "00", drop / "00" / "attention_head.py"):
        os.chown(path, 54_323, 54_323)
    (drop / "alice.py").write_text(reference_source())
    os.chown(drop / "alice.py", 54_324, 54_324)
    for number in range(5):  # the instructor's own, as many as there are
        (drop / f"z{number}.py").write_text(reference_source())
    found = submission.discover(drop)
    graded = [name for _, name in found.items]
    assert graded == ["0-00.py", "0-01.py", "0-02.py", "alice.py", "z0.py", "z1.py", "z2.py", "z3.py", "z4.py"], graded
    reasons = dict(found.skipped)
    for name in ["00/attention_head.py"] + [f"0-{number:02d}.py" for number in range(3, 8)]:
        assert reasons[name] == (f"uid 54323 made more than {submission.MOST_PER_ACCOUNT} submissions here, "
                                 f"and only its first {submission.MOST_PER_ACCOUNT} by name are graded"), reasons


def test_a_folder_made_first_in_a_student_s_name_by_a_classmate_does_not_make_the_student_s_file_theirs(tmp_path):
    """In a drop folder the class may write, whoever makes a folder first owns it. A classmate who
    makes the folder named for a student's account, and puts a notebook in it, is not the student:
    the account the folder is named for is, and its file is graded; the classmate's is listed,
    naming both accounts."""
    import pwd

    from autograder import submission

    if os.geteuid() != 0:
        pytest.skip("giving files to other accounts needs root")
    student = pwd.getpwnam("nobody")
    drop = tmp_path / "drop"
    (drop / "nobody").mkdir(parents=True)
    os.chmod(drop, 0o1777)
    os.chmod(drop / "nobody", 0o1777)
    os.chown(drop / "nobody", 54_325, 54_325)  # the squatter made it first
    (drop / "nobody" / "attention_head.ipynb").write_text("{}")
    os.chown(drop / "nobody" / "attention_head.ipynb", 54_325, 54_325)
    (drop / "nobody" / "attention_head.py").write_text(reference_source())
    os.chown(drop / "nobody" / "attention_head.py", student.pw_uid, student.pw_gid)
    found = submission.discover(drop)
    assert [name for _, name in found.items] == ["nobody/attention_head.py"], found
    assert dict(found.skipped) == {"nobody/attention_head.ipynb": (
        f"made by uid 54325, not by nobody (uid {student.pw_uid}) (the account it is named for), "
        "whose own file is graded")}


def test_an_account_past_its_cap_costs_no_parse_and_a_bounded_listing(tmp_path, monkeypatch):
    """Sixty thousand folders of one classmate, each a module slow to parse beside a notebook, held
    the reading of the class's folder for an hour, before the cap on their submissions applied: a
    folder of an account past its cap is not sorted out at all, and past MOST_CAPPED_LISTED its
    submissions are counted in a note, not listed one by one."""
    from autograder import submission

    if os.geteuid() != 0:
        pytest.skip("giving files to other accounts needs root")
    monkeypatch.setattr(submission, "MOST_CAPPED_LISTED", 5)
    parsed = []
    real = submission.untouched_starter
    monkeypatch.setattr(submission, "untouched_starter", lambda path, name=None: parsed.append(name) or real(path, name))
    drop = tmp_path / "drop"
    drop.mkdir()
    for number in range(20):
        folder = drop / f"d{number:02d}"
        folder.mkdir()
        (folder / "attention_head.py").write_text(reference_source())
        (folder / "attention_head.ipynb").write_text("{}")
        for path in (folder, folder / "attention_head.py", folder / "attention_head.ipynb"):
            os.chown(path, 54_326, 54_326)
    (drop / "zoe.py").write_text(reference_source())
    found = submission.discover(drop)
    assert [name for _, name in found.items] == [f"d{n:02d}/attention_head.py" for n in range(3)] + ["zoe.py"]
    assert len(parsed) == submission.MOST_PER_ACCOUNT, parsed
    capped = [name for name, reason in found.skipped if "made more than" in reason]
    assert len(capped) == 5, found.skipped
    assert "uid 54326 made more than 3 submissions here: 34 more of its files are not graded, of which 29 are not listed" \
        in found.notes, found.notes


def test_a_name_planted_beside_a_file_written_in_a_shared_folder_is_passed_over(tmp_path):
    """Written into a sticky folder others may write (a bundle or a trace in /tmp), a file's
    temporary name was `.name.PID.tmp`, opened without O_EXCL: a classmate who planted named pipes
    under the coming pids hung the command, and world-writable files of theirs got the instructor's
    data. The temporary file is now made new, under a random name; one taken is passed over."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    script = f"""
import os, secrets, sys
from pathlib import Path
from autograder.store import write_atomically
shared = Path({str(shared)!r})
# the old names, for the next pids, and the first random name this run will draw
for pid in range(os.getpid(), os.getpid() + 50):
    os.mkfifo(shared / f".bundle.zip.{{pid}}.tmp")
drawn = iter(["aaaaaaaaaaaa", "", "aaaaaaaaaaaa"])  # each write draws the planted name first ("": a random one)
real = secrets.token_hex
secrets.token_hex = lambda n: next(drawn, "") or real(n)
os.mkfifo(shared / f".bundle.zip.{{os.getpid()}}.aaaaaaaaaaaa.tmp")
planted = shared / f".trace.json.{{os.getpid()}}.aaaaaaaaaaaa.tmp"
planted.write_text("theirs")
os.chmod(planted, 0o666)
write_atomically(shared / "bundle.zip", b"the instructor's bundle", mode=0o600)
write_atomically(shared / "trace.json", "the instructor's trace")
assert next(drawn, None) is None  # both planted names were drawn, and passed over
print("done")
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-2000:]
    assert (shared / "bundle.zip").read_bytes() == b"the instructor's bundle"
    assert (shared / "trace.json").read_text() == "the instructor's trace"
    assert oct((shared / "bundle.zip").stat().st_mode & 0o777) == oct(0o600)
    planted = [path for path in shared.iterdir() if path.name.endswith(".tmp")]
    assert len(planted) == 52 and all(path.is_fifo() or path.read_text() == "theirs" for path in planted), planted
