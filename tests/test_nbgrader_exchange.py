"""What students hand in around the notebook, through nbgrader's own exchange: real `nbgrader
release_assignment`, `submit`, `collect`, `qkv-grade --nbgrader`, `generate_feedback` and
`release_feedback`, in a course qkv-course wrote.

Each student submits the reference, with one thing beside it that the instructor's tools would
trust: alice nothing (the control); eve a link to the course's source notebook in place of her
notebook; sol a copy of that source notebook itself; victor an `ipykernel_launcher.py`, which a
kernel started in his autograded folder would import first, and a note only he may read; trudy a
folder named `timestamp.txt` and another named `submission_secret.txt`; oscar a timestamp of a
terminal's escape codes; bulk 1 200 one-letter markdown cells, each a share of formgrader's render.
And mallory, another account, puts in a later folder in alice's name holding the unfilled notebook;
fay a named pipe beside her notebook; shut a folder of mode 555; linda a link in her own name to
alice's folder; and an entry named without a time.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.nbgrader_exchange import MOST_ENTRIES, MOST_TOLD
from support import ASSIGNMENT, NOTEBOOK, build_course, filled_notebook, gradebook_scores, reference_source

ESCAPES = "\x1b]2;OWNED\x07\x1b[31;1mFAKE LINE\x1b[0m"
MALLORY = 54_321  # an account of no one running the tests
FLOODER = 54_322  # another, who fills the inbound folder with entries no one collects
FLOOD = 250
BACKDATED, POSTDATED = "2024-01-04 23:00:00.000000 UTC", "2099-01-01 00:00:00.000000 UTC"
LAUNCHER = "open(__file__ + '.ran', 'w').close()\nfrom ipykernel import kernelapp as app\napp.launch_new_instance()\n"


def _run(argv, cwd, env):
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _nbgrader(*argv, cwd, env):
    return _run([sys.executable, "-m", "nbgrader", *argv], cwd, env)


@pytest.fixture(scope="module")
def exchange(tmp_path_factory):
    root = tmp_path_factory.mktemp("exchange")
    course, env = build_course(root, {})
    shared = root / "shared"
    where = f"--Exchange.root={shared}"
    released = course / "release" / ASSIGNMENT / NOTEBOOK
    done = _nbgrader("release_assignment", ASSIGNMENT, where, cwd=course, env=env)
    assert done.returncode == 0, done.stderr
    shared.chmod(0o1777)  # as the README has the exchange's root made: no one renames another's course folder
    inbound = shared / course.name / "inbound"

    def submit(student: str, notebook, extra: dict[str, str] | None = None) -> Path:
        """`nbgrader submit` from a folder of the student's own; the inbound folder renamed for
        `student` (submit names it after the user running it)."""
        work = root / "students" / student
        shutil.copytree(course / "release" / ASSIGNMENT, work / ASSIGNMENT)
        nbformat.write(notebook, work / ASSIGNMENT / NOTEBOOK)
        for name, text in (extra or {}).items():
            (work / ASSIGNMENT / name).write_text(text)
        before = set(os.listdir(inbound)) if inbound.exists() else set()
        submitted = _nbgrader("submit", ASSIGNMENT, f"--course={course.name}", where, cwd=work, env=env)
        assert submitted.returncode == 0, submitted.stderr
        (made,) = set(os.listdir(inbound)) - before
        renamed = inbound / (student + "+" + made.split("+", 1)[1])
        os.rename(inbound / made, renamed)
        return renamed

    reference = filled_notebook(released, reference_source())
    alice = submit("alice", reference)
    if os.geteuid() == 0:  # mallory, another account, hands in the unfilled notebook as alice, later
        later = "2099-01-01 00:00:00.000000 UTC"
        forged = inbound / f"alice+{ASSIGNMENT}+{later}+forged"
        shutil.copytree(alice, forged)
        shutil.copy(released, forged / NOTEBOOK)
        (forged / "timestamp.txt").write_text(later)
        for path in [forged, *forged.rglob("*")]:
            os.chown(path, MALLORY, MALLORY, follow_symlinks=False)
        for number in range(FLOOD):  # in a name not theirs, and in names with no time
            for name in (f"zed+{ASSIGNMENT}+{later}+{number}", f"zed+{ASSIGNMENT}+not a time+{number}"):
                (inbound / name).mkdir()
                os.chown(inbound / name, FLOODER, FLOODER)
    eve = submit("eve", reference)
    (eve / NOTEBOOK).unlink()
    (eve / NOTEBOOK).symlink_to(course / "source" / ASSIGNMENT / NOTEBOOK)
    submit("sol", nbformat.read(course / "source" / ASSIGNMENT / NOTEBOOK, as_version=4))
    victor = submit("victor", reference, {"ipykernel_launcher.py": LAUNCHER, "notes.txt": "mine alone"})
    (victor / "notes.txt").chmod(0o600)
    trudy = submit("trudy", reference)
    for name in ("timestamp.txt", "submission_secret.txt"):
        (trudy / name).unlink()
        (trudy / name).mkdir()
        (trudy / name / "x.txt").write_text("x")
    oscar = submit("oscar", reference)
    (oscar / "timestamp.txt").write_text(ESCAPES)
    with open(oscar / (ESCAPES + "big.bin"), "wb") as big:  # past max_file_size: left out, its name logged
        big.truncate(101 * 1000 * 1000)
    fay = submit("fay", reference)  # a named pipe beside her notebook: opened, it would wait forever
    os.mkfifo(fay / "pipe")
    shut = submit("shut", reference)  # a folder its copy, as handed in, would keep shut to changes
    (shut / "notes").mkdir()
    (shut / "notes" / "a.txt").write_text("x")
    (shut / "notes").chmod(0o555)
    # an entry that is a link, in one's own name, to a classmate's folder; a name with no time in it
    (inbound / f"linda+{ASSIGNMENT}+2099-01-01 00:00:00.000000 UTC+link").symlink_to(alice)
    (inbound / f"nameless+{ASSIGNMENT}+not a time+x").mkdir()
    bulk = filled_notebook(released, reference_source())
    bulk.cells += [nbformat.v4.new_markdown_cell("x") for _ in range(1_200)]
    submit("bulk", bulk)
    moe = submit("moe", reference)  # a program of his made set-user-id, and a notebook anyone may write
    (moe / "tool").write_text("#!/bin/sh\nid\n")
    (moe / "tool").chmod(0o4777)
    (moe / NOTEBOOK).chmod(0o666)
    flo = submit("flo", reference)  # a folder of more empty files than qkv-grade looks at: no bytes at all
    (flo / "n").mkdir()
    for number in range(MOST_ENTRIES + 1):
        (flo / "n" / str(number)).touch()
    # bart dates his submission (its folder's name and timestamp.txt) before the due date; cleo
    # dates hers far ahead, where no later submission of hers would ever count as newer; dora leaves
    # the name as submit made it and backdates timestamp.txt alone
    for student, when in (("bart", BACKDATED), ("cleo", POSTDATED)):
        made = submit(student, reference)
        (made / "timestamp.txt").write_text(when)
        os.rename(made, inbound / f"{student}+{ASSIGNMENT}+{when}+{made.name.rsplit('+', 1)[1]}")
    (submit("dora", reference) / "timestamp.txt").write_text(BACKDATED)
    # lou names his folder with its true time and a dot after the zone, which nbgrader's parser
    # reads and qkv-grade's does not: copied as written, it left the gradebook with no time (never late)
    made = submit("lou", reference)
    _, _, said, rest = made.name.split("+")
    os.rename(made, inbound / f"lou+{ASSIGNMENT}+{said}.+{rest}")
    # ned hands in past `nbgrader submit`: a folder of his own in inbound/, his notebook alone in it
    (submit("ned", reference) / "submission_secret.txt").unlink()

    steps = {}
    for name, argv in (("collect", ["collect", ASSIGNMENT, where]),
                       ("trusted", None),
                       ("feedback", ["generate_feedback", ASSIGNMENT]),
                       ("release", ["release_feedback", ASSIGNMENT, where])):
        steps[name] = (_run([sys.executable, "-m", "autograder.cli", "--nbgrader", str(course), ASSIGNMENT], root, env)
                       if argv is None else _nbgrader(*argv, cwd=course, env=env))
    return {"course": course, "shared": shared, **steps}


def test_a_course_folder_anyone_could_put_in_place_is_not_collected_from(tmp_path):
    """nbgrader makes the exchange's root writable by everyone without the sticky bit: a student
    may rename the course's folder and put one of their own in its place, whose inbound folder then
    receives the classmates' submissions, for that student to read, hide or hand in as their own.
    The collect refuses an exchange where that can happen, and one where it has."""
    course, env = build_course(tmp_path, {})
    shared = tmp_path / "shared"
    where = f"--Exchange.root={shared}"
    assert _nbgrader("release_assignment", ASSIGNMENT, where, cwd=course, env=env).returncode == 0
    done = _nbgrader("collect", ASSIGNMENT, where, cwd=course, env=env)
    assert done.returncode != 0 and f"others may write in {shared} (mode 777)" in done.stderr, done.stderr
    assert "`chmod +t` on the exchange's root" in done.stderr and not (course / "submitted").exists()
    shared.chmod(0o1777)
    assert _nbgrader("collect", ASSIGNMENT, where, cwd=course, env=env).returncode == 0
    if os.geteuid() != 0:
        return
    # the swap itself: the course's folder renamed away, another account's put in its place
    os.rename(shared / course.name, shared / ".old")
    (shared / course.name / "inbound").mkdir(parents=True)
    for folder in (shared / course.name, shared / course.name / "inbound"):
        os.chown(folder, MALLORY, MALLORY)
    done = _nbgrader("collect", ASSIGNMENT, where, cwd=course, env=env)
    assert done.returncode != 0 and f"belongs to another user (uid {MALLORY})" in done.stderr, done.stderr


def _line(done, student: str) -> str:
    """What the run says of `student`, its lines joined."""
    lines = [line for line in done.stdout.splitlines() if line.startswith(f"{student}:")]
    assert lines, (student, done.stdout)
    return "\n".join(lines)


def test_the_exchange_is_collected_graded_and_released_for_everyone_else(exchange):
    for name in ("collect", "trusted", "feedback", "release"):
        assert exchange[name].returncode == 0, (name, exchange[name].stderr[-3000:])
    scores = gradebook_scores(exchange["course"])
    for student in ("alice", "victor", "trudy", "oscar", "fay", "shut", "bart", "cleo", "moe", "dora", "ned", "lou"):
        assert sum(value or 0 for value in scores[student].values()) == sum(
            value or 0 for value in scores["alice"].values()) > 0, student
    released = list((exchange["shared"] / exchange["course"].name / "feedback").glob("*.html"))
    # alice, victor, trudy, oscar, fay, shut, bart, cleo, moe, dora, and ned, whose submission had no
    # secret (release_feedback stopped at it, and everyone after it got nothing), and lou
    assert len(released) == 12, released


def test_an_entry_that_is_no_folder_or_has_no_time_is_one_line_and_everyone_else_is_collected(exchange):
    collected, course = exchange["collect"], exchange["course"]
    assert "+link': not collected: it is not a folder" in collected.stderr, collected.stderr[-3000:]
    assert "+not a time+x': not a submission's name" in collected.stderr, collected.stderr[-3000:]
    assert not (course / "submitted" / "linda").exists() and not (course / "submitted" / "nameless").exists()
    assert not (course / "submitted" / "fay" / ASSIGNMENT / "pipe").exists()  # not copied: a pipe is no file
    notes = course / "submitted" / "shut" / ASSIGNMENT / "notes"  # the instructor's own to remove again
    assert notes.stat().st_mode & 0o700 == 0o700 and (notes / "a.txt").read_text() == "x"


def test_a_submission_made_by_another_account_in_a_student_s_name_is_not_collected(exchange):
    if os.geteuid() != 0:
        pytest.skip("giving a folder to another account needs root")
    collected = exchange["collect"]
    assert "not collected: it claims to be submitted by 'alice' but was made by 'user id 54321'" in collected.stderr, \
        collected.stderr[-3000:]
    scores = gradebook_scores(exchange["course"])  # her own notebook, the reference: what the others score
    assert sum(value or 0 for value in scores["alice"].values()) == sum(
        value or 0 for value in scores["victor"].values()) > 0


def test_one_account_s_flood_of_entries_is_a_dozen_lines_naming_it_and_everyone_else_is_collected(exchange):
    """Every entry of the flood is told by the account that made it; past MOST_TOLD of one account's,
    the rest are counted in one line, and the other accounts' entries are told as ever."""
    if os.geteuid() != 0:
        pytest.skip("giving a folder to another account needs root")
    collected = exchange["collect"]
    theirs = [line for line in collected.stderr.splitlines() if "zed+" in line or "54322" in line]
    named = {line.split("'")[1] for line in theirs[:-1]}
    assert len(named) == MOST_TOLD and len(theirs) <= 2 * MOST_TOLD + 1, theirs
    assert all("made by 'user id 54322'" in line for line in theirs), theirs
    assert f"{2 * FLOOD - MOST_TOLD} more entries made by 'user id 54322' were not collected" in theirs[-1], theirs
    assert "not collected: it claims to be submitted by 'alice' but was made by 'user id 54321'" in collected.stderr
    assert not (exchange["course"] / "submitted" / "zed").exists()


def test_the_collected_time_is_written_as_nbgrader_submit_writes_it_never_as_the_student_s_text(exchange):
    from autograder.nbgrader_trusted import _parse_timestamp

    course = exchange["course"]
    written = (course / "submitted" / "lou" / ASSIGNMENT / "timestamp.txt").read_text()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6} UTC", written), written
    said = next(name for name in os.listdir(exchange["shared"] / course.name / "inbound")
                if name.startswith(f"lou+{ASSIGNMENT}+")).split("+")[2]
    assert said == written + "."
    assert _parse_timestamp(written) is not None
    said_of_lou = [line for line in exchange["trusted"].stdout.splitlines() if line.startswith("lou")]
    assert said_of_lou and not any("timestamp.txt" in line for line in said_of_lou), said_of_lou


def test_a_link_in_the_exchange_is_collected_as_a_link_and_graded_as_nothing(exchange):
    notebook = exchange["course"] / "submitted" / "eve" / ASSIGNMENT / NOTEBOOK
    assert notebook.is_symlink()  # nbgrader's own collect would have copied the source notebook
    assert sum(gradebook_scores(exchange["course"])["eve"].values()) == 0
    assert "symbolic link" in _line(exchange["trusted"], "eve")


def test_a_copy_of_the_source_notebook_is_not_graded(exchange):
    assert sum(gradebook_scores(exchange["course"])["sol"].values()) == 0  # the reference, and scored nothing
    line = _line(exchange["trusted"], "sol")
    assert "BEGIN SOLUTION" in line and "copy of the instructor's notebook" in line, line


def test_no_python_file_of_the_students_is_put_where_a_kernel_would_import_it(exchange):
    folder = exchange["course"] / "autograded" / "victor" / ASSIGNMENT
    assert (folder / NOTEBOOK).exists() and not (folder / "ipykernel_launcher.py").exists()
    notes = folder / "notes.txt"
    assert notes.read_text() == "mine alone" and stat.S_IMODE(notes.stat().st_mode) == 0o600


def test_nbgraders_own_files_are_copied_only_as_submit_writes_them(exchange):
    """timestamp.txt is the collect's own (the time in the folder's name, as nbgrader submit writes
    both), whatever the student left there: a folder (trudy), escapes (oscar). The rest of what
    submit writes is copied only as it writes it."""
    from nbgrader.utils import parse_utc

    course = exchange["course"]
    made = parse_utc((course / "submitted" / "alice" / ASSIGNMENT / "timestamp.txt").read_text())
    for student in ("trudy", "oscar"):
        written = (course / "submitted" / student / ASSIGNMENT / "timestamp.txt").read_text()
        assert abs((parse_utc(written) - made).total_seconds()) < 600, (student, written)
        assert (course / "autograded" / student / ASSIGNMENT / "timestamp.txt").read_text() == written
    trudy = course / "autograded" / "trudy" / ASSIGNMENT
    assert (trudy / "submission_secret.txt").is_file() and not (trudy / "timestamp.txt" / "x.txt").exists()
    assert "submission_secret.txt is not what nbgrader submit writes" in _line(exchange["trusted"], "trudy")
    alice = exchange["course"] / "autograded" / "alice" / ASSIGNMENT
    submitted = exchange["course"] / "submitted" / "alice" / ASSIGNMENT
    for name in ("timestamp.txt", "submission_secret.txt"):
        assert (alice / name).read_text() == (submitted / name).read_text()
    for name in ("collect", "trusted", "feedback", "release"):
        assert "\x1b" not in exchange[name].stdout + exchange[name].stderr, name
    assert "Ignoring file too large" in exchange["collect"].stderr and "\\x1b]2;OWNED" in exchange["collect"].stderr


def test_a_collected_copy_keeps_no_set_id_bit_nor_write_bits_for_anyone_but_the_instructor(exchange):
    folder = exchange["course"] / "submitted" / "moe" / ASSIGNMENT
    assert stat.S_IMODE((folder / "tool").stat().st_mode) == 0o755
    assert stat.S_IMODE((folder / NOTEBOOK).stat().st_mode) == 0o644


def test_a_submission_of_more_files_than_are_looked_at_is_one_line_and_everyone_else_is_collected(exchange):
    collected = exchange["collect"]
    said = [line for line in collected.stderr.splitlines() if f"'flo+{ASSIGNMENT}+" in line]
    assert len(said) == 1 and f"not collected: its folder holds more than {MOST_ENTRIES} files and folders" \
        in said[0], collected.stderr[-3000:]
    assert not (exchange["course"] / "submitted" / "flo" / ASSIGNMENT).exists()
    assert not list((exchange["course"] / "submitted" / "flo").glob(".*"))  # nothing half-made left behind


def test_a_submission_time_its_files_belie_is_collected_as_the_time_they_last_changed(exchange):
    """The time in a submission's name and timestamp.txt is the student's text; when the files last
    changed is the kernel's. bart's, months before he handed it in, and cleo's, decades after, are
    each taken as made when the files were, in the order of submissions and in timestamp.txt; the
    collect writes timestamp.txt itself, so dora's, backdated beside a true name, is not kept."""
    from nbgrader.utils import parse_utc

    collected, course = exchange["collect"], exchange["course"]
    made = (course / "submitted" / "alice" / ASSIGNMENT / "timestamp.txt").read_text()
    for student, claimed in (("bart", BACKDATED), ("cleo", POSTDATED)):
        said = [line for line in collected.stderr.splitlines() if f"'{student}+{ASSIGNMENT}+{claimed}+" in line]
        assert len(said) == 1 and "its name says it was submitted at" in said[0] \
            and "collected as submitted then" in said[0], collected.stderr[-3000:]
        written = (course / "submitted" / student / ASSIGNMENT / "timestamp.txt").read_text()
        assert abs(parse_utc(written) - parse_utc(made)).total_seconds() < 600, (written, made)
    dora = (course / "submitted" / "dora" / ASSIGNMENT / "timestamp.txt").read_text()
    inbound = os.listdir(exchange["shared"] / course.name / "inbound")
    assert dora != BACKDATED and any(name.startswith(f"dora+{ASSIGNMENT}+{dora}+") for name in inbound), dora
    honest = [line for line in collected.stderr.splitlines() if "'alice+" in line and "+forged'" not in line]
    assert not any("its name says" in line for line in honest), honest


def test_a_notebook_of_too_many_cells_is_not_graded(exchange):
    assert sum(gradebook_scores(exchange["course"])["bulk"].values()) == 0
    assert "cells, more than the 1000" in _line(exchange["trusted"], "bulk")


def _swapping(monkeypatch, folder: Path, swaps: dict) -> None:
    """Race the copy at its worst instant: once it has looked at an entry named in `swaps` (and seen
    a file or a folder) and before it opens it, the entry is replaced by what its function makes, as
    a student racing the collect would replace it."""
    real = os.stat

    def stat_then_swap(name, *args, dir_fd=None, **kwargs):
        found = real(name, *args, dir_fd=dir_fd, **kwargs)
        if dir_fd is not None and name in swaps and Path(f"/proc/self/fd/{dir_fd}").resolve() == folder.resolve():
            path = folder / name
            shutil.rmtree(path) if path.is_dir() and not path.is_symlink() else path.unlink()
            swaps.pop(name)(path)
        return found

    monkeypatch.setattr(os, "stat", stat_then_swap)


def _no_patterns(folder, names):
    return []


def test_an_entry_swapped_for_a_link_or_a_pipe_while_its_folder_is_copied_is_left_out_not_followed(tmp_path,
                                                                                                  monkeypatch):
    """The copy opens each entry from its folder's descriptor with O_NOFOLLOW (and a file with
    O_NONBLOCK, its type read from what it opened): a notebook swapped for a link to a classmate's,
    a folder swapped for a link to hers, and a file swapped for a named pipe, between the listing
    and the copy, are left out; nothing of hers is copied, and the copy does not hang."""
    from autograder.nbgrader_exchange import _Budget, _copy_folder

    hers = tmp_path / "alice"
    (hers / "work").mkdir(parents=True)
    (hers / "attention_head.ipynb").write_text("ALICE'S NOTEBOOK")
    (hers / "work" / "notes.txt").write_text("ALICE'S NOTES")
    mine = tmp_path / "inbound"
    (mine / "work").mkdir(parents=True)
    for name in ("attention_head.ipynb", "pipe.txt", "kept.txt"):
        (mine / name).write_text("mine")
    (mine / "work" / "notes.txt").write_text("mine")
    _swapping(monkeypatch, mine, {"attention_head.ipynb": lambda path: path.symlink_to(hers / "attention_head.ipynb"),
                                  "work": lambda path: path.symlink_to(hers / "work"),
                                  "pipe.txt": lambda path: os.mkfifo(path)})
    left_out = []
    descriptor = os.open(mine, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        _copy_folder(descriptor, str(tmp_path / "copy"), _no_patterns, _Budget(10 ** 6),
                     lambda name, error: left_out.append(name))
    finally:
        os.close(descriptor)
    copied = {str(path.relative_to(tmp_path / "copy")): path for path in (tmp_path / "copy").rglob("*")}
    assert sorted(left_out) == ["attention_head.ipynb", "pipe.txt", "work"], left_out
    assert sorted(copied) == ["kept.txt"], copied
    assert (tmp_path / "copy" / "kept.txt").read_text() == "mine"


def test_a_folder_that_grows_past_the_collect_s_bound_while_it_is_copied_is_refused(tmp_path, monkeypatch):
    """The bound on what is collected is counted as the copy reads, not from a count made before it."""
    from autograder.nbgrader_exchange import TooLarge, _Budget, _copy_folder

    mine = tmp_path / "inbound"
    mine.mkdir()
    (mine / "a.txt").write_text("x")
    _swapping(monkeypatch, mine, {"a.txt": lambda path: path.write_bytes(bytes(5000))})
    descriptor = os.open(mine, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        with pytest.raises(TooLarge):
            _copy_folder(descriptor, str(tmp_path / "copy"), _no_patterns, _Budget(4000), lambda name, error: None)
    finally:
        os.close(descriptor)
