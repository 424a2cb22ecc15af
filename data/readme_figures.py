"""The README's figures and pictures, made again from the current code on the bundled data.

    .venv/bin/python data/readme_figures.py          # rerun, rewrite README.md, retake the pictures
    .venv/bin/python data/readme_figures.py --check  # only list what is out of date (exit status 1)

What the README quotes from a run of the bundled data (a score, a count, a line of feedback) sits
between `<!-- figure NAME -->` and `<!-- /figure -->`, which Markdown does not show. Each picture
is followed by `<!-- rendered from DIGEST -->`: a digest of what the picture shows (the sample
notebook's cells and what its checks print, the feedback page's step feedback, the class report's
page without its images' bytes), so that a stale picture shows without comparing pixels.
tests/test_readme.py recomputes every figure and digest with `current()`, and tests/test_report.py
the report's digest on the report it makes, and they fail when the README says otherwise.

The figures come from the commands the README shows, run on the bundled data. The pictures are
taken by the browser tests that check those pages (tests/test_browser.py, tests/test_report.py), so
a picture is only ever replaced by one of a page that passed its checks. Everything runs under the
test suite's fixed grading key (tests/conftest.py), so the figures are the same on every machine.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [folder for folder in (str(REPO), str(REPO / "tests")) if folder not in sys.path]

from support import FEEDBACK_COURSE_SEED, REPORT_RUN, SAMPLE_NOTEBOOK, qkv_grade  # noqa: E402

README = REPO / "README.md"
KEY = "5eed" * 16
"""The grading key the test suite fixes (tests/conftest.py): the hidden cases behind every figure."""
SEED = 1
"""The seed of the sample submission's figures."""
SAMPLE_CLASS = REPO / "data" / "sample-class"
SAMPLE_MODULE = REPO / "data" / "sample-submission" / "attention_head.py"
RELEASE = REPO / "assignments" / "attention_head"
COMMAND = ".venv/bin/python data/readme_figures.py"

REPORT_PICTURE = "data/report/sample-class.png"
# Each picture the README shows: the browser test that takes it, and the file that test writes
# (into $QKV_SCREENSHOTS, or to $QKV_REPORT_SCREENSHOT).
PICTURES = {
    "data/screenshots/notebook-softmax-check.png": (
        "tests/test_browser.py::test_run_all_with_one_mistake_names_it_without_our_frames_and_draws_a_truthful_heatmap",
        "notebook-softmax-check.png"),
    "data/screenshots/feedback.png": (
        "tests/test_browser.py::test_the_feedback_page_names_steps_hides_the_hook_and_wraps_every_line",
        "feedback.png"),
    REPORT_PICTURE: ("tests/test_report.py::test_the_page_renders_in_chromium_with_every_image", "sample-class.png"),
}

FIGURES = ("class-size", "sample-score", "sample-score-alone", "steps-paying-alone", "carried-forward-line",
           "hidden-calls")
"""The figures quoted from runs, each marked by name in the README."""
FIGURE = re.compile(r"<!-- figure ([\w-]+) -->(.*?)<!-- /figure -->", re.S)
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+)\)")
PICTURE = re.compile(IMAGE.pattern + r"<!-- rendered from (\w*) -->")
NUMBERS = "zero one two three four five six seven eight nine ten eleven twelve thirteen".split()

# Runs the sample notebook's cells as Run All does, in the release folder beside public_checks.py,
# and prints what each code cell shows: its printed lines, or the explanation a failing check
# shows in place of a traceback. The heatmap's cell draws a picture and is left out.
RUN_ALL = r"""
import contextlib, io, json, re, sys
sys.path.insert(0, ".")
namespace, shown = {"__name__": "__main__"}, []
for cell in json.load(open(sys.argv[1], encoding="utf-8"))["cells"]:
    if cell["cell_type"] != "code" or cell["metadata"].get("qkv", {}).get("role") == "plot":
        continue
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        try:
            exec(compile("".join(cell["source"]), cell.get("id", "cell"), "exec"), namespace)
        except Exception as error:
            render = getattr(error, "_render_traceback_", None)
            print("\n".join(render() if render else [f"{type(error).__name__}: {error}"]))
    shown.append(re.sub(r"\x1b\[[0-9;]*m", "", printed.getvalue()))
print(json.dumps(shown))
"""


def _graded(*args: str) -> list | dict:
    done = qkv_grade(*args, "--format", "json", cwd=REPO, env={"QKV_CASE_KEY": KEY})
    if done.returncode != 0:
        raise RuntimeError(f"qkv-grade {' '.join(args)} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def _checks_shown(notebook: Path) -> list[str]:
    done = subprocess.run([sys.executable, "-c", RUN_ALL, str(notebook)], cwd=RELEASE, capture_output=True,
                          text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"running {notebook.name}'s cells failed: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout)


def _digest(shown) -> str:
    text = json.dumps(shown, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _cells(notebook: Path) -> list[list[str]]:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return [[cell["cell_type"], "".join(cell["source"])] for cell in cells]


def _steps_shown(result: dict) -> list[dict]:
    """A result's steps as people read them: no seed, isolation or timing."""
    return [{name: step[name] for name in ("id", "score", "max_score", "status", "diagnoses", "feedback",
                                           "carried_from")} for step in result["steps"]]


def _number(count: int) -> str:
    return NUMBERS[count] if count < len(NUMBERS) else str(count)


def report_digest(page: str) -> str:
    """The digest of a class report's page, less its images' bytes (they show what the page's
    tables say, in matplotlib's rendering of the day)."""
    return _digest(re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]*", "data:image/png;base64,", page))


def current(scratch: Path, report: bool = True) -> dict[str, str]:
    """Every figure (by name) and every picture's digest (by its path), from the current code;
    `scratch` is a folder for the runs' results. `report=False` leaves out the class report's
    picture, whose digest takes grading the whole class (tests/test_report.py checks it on the
    report it makes anyway)."""
    from autograder.grading import Grader
    from autograder.submission import discover

    with ThreadPoolExecutor(max_workers=5) as pool:
        if report:  # the slowest first: one of the class runs into the time limit, step after step
            class_run = pool.submit(_graded, str(SAMPLE_CLASS), *REPORT_RUN, "--out", str(scratch / "results"),
                                    "--report", str(scratch / "report"))
        carried = pool.submit(_graded, str(SAMPLE_MODULE), "--seed", str(SEED))
        alone = pool.submit(_graded, str(SAMPLE_MODULE), "--seed", str(SEED), "--no-carry-forward")
        course = pool.submit(_graded, str(SAMPLE_NOTEBOOK), "--seed", str(FEEDBACK_COURSE_SEED))
        checks = pool.submit(_checks_shown, SAMPLE_NOTEBOOK)
        calls = sum(len(step_calls) for _, step_calls in Grader(SEED, key=bytes.fromhex(KEY)).calls)
        carried, alone = carried.result(), alone.result()
        attention = next(step for step in carried["steps"] if step["id"] == "attention")
        values = {
            "class-size": _number(len(discover(SAMPLE_CLASS).items)),
            "sample-score": f"{carried['score']:g} / {carried['max_score']:g}",
            "sample-score-alone": f"{alone['score']:g}",
            "steps-paying-alone": _number(sum(step["score"] < step["max_score"] for step in alone["steps"])),
            "carried-forward-line": attention["feedback"].splitlines()[1],
            "hidden-calls": str(calls),
            "data/screenshots/notebook-softmax-check.png": _digest(
                {"cells": _cells(SAMPLE_NOTEBOOK), "shown": checks.result()}),
            "data/screenshots/feedback.png": _digest(
                {"cells": _cells(SAMPLE_NOTEBOOK), "steps": _steps_shown(course.result())}),
        }
        if report:
            class_run.result()
            values[REPORT_PICTURE] = report_digest((scratch / "report" / "index.html").read_text(encoding="utf-8"))
        return values


def quoted(readme: str) -> dict[str, str]:
    """What the README says now: each figure by name, each picture's recorded digest by its path."""
    found: dict[str, str] = {}
    for name, value in FIGURE.findall(readme) + PICTURE.findall(readme):
        if name in found:
            raise ValueError(f"README.md marks {name} twice")
        found[name] = value
    return found


def unmarked(readme: str, values: dict[str, str]) -> list[str]:
    """What keeps the README's marks from matching `values`, one line each: a figure or a picture
    in `values` not marked, a mark this script does not make, a picture without its digest."""
    said = quoted(readme)
    return ([f"{name}: not marked in README.md" for name in values if name not in said]
            + [f"README.md marks {name}, which {COMMAND} does not make" for name in said
               if name not in FIGURES and name not in PICTURES]
            + [f"the picture {path}: no digest beside it in README.md" for path in IMAGE.findall(readme)
               if path not in said])


def stale(readme: str, values: dict[str, str]) -> list[str]:
    """One line for each figure or picture in `values` that the README gives otherwise, and for
    each mark out of place (`unmarked`)."""
    said = quoted(readme)
    lines = unmarked(readme, values)
    for name, value in values.items():
        if name in PICTURES and not (REPO / name).is_file():
            lines.append(f"the picture {name}: missing")
        elif name in said and said[name] != value:
            lines.append(f"the picture {name}: it shows what the code no longer gives" if name in PICTURES
                         else f"the figure {name}: README.md has {said[name]!r}, the code now gives {value!r}")
    return lines


def rewritten(readme: str, values: dict[str, str]) -> str:
    readme = FIGURE.sub(lambda match: f"<!-- figure {match[1]} -->{values[match[1]]}<!-- /figure -->", readme)
    return PICTURE.sub(lambda match: match[0].replace(f"<!-- rendered from {match[2]} -->",
                                                      f"<!-- rendered from {values[match[1]]} -->"), readme)


def retake(scratch: Path) -> None:
    """Run the browser tests that take the pictures and put what they took in place. CI=true makes
    a test that cannot run (no Chromium, no sandbox) fail rather than skip."""
    shots = scratch / "shots"
    shots.mkdir()
    tests = sorted({test for test, _ in PICTURES.values()})
    env = {**os.environ, "QKV_CASE_KEY": KEY, "QKV_SCREENSHOTS": str(shots), "CI": "true",
           "QKV_REPORT_SCREENSHOT": str(shots / PICTURES[REPORT_PICTURE][1])}
    done = subprocess.run([sys.executable, "-m", "pytest", *tests, "-q", "-p", "no:cacheprovider"], cwd=REPO, env=env)
    if done.returncode != 0:
        raise SystemExit(f"the browser tests that take the pictures failed (status {done.returncode}); "
                         "no picture and no figure was changed")
    for test, taken in PICTURES.values():
        if not (shots / taken).is_file():
            raise SystemExit(f"{test} took no {taken}; no picture and no figure was changed")
    for path, (_, taken) in PICTURES.items():
        shutil.copyfile(shots / taken, REPO / path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only list what is out of date; exit status 1 if any")
    args = parser.parse_args(argv)
    readme = README.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="readme-figures-") as scratch:
        values = current(Path(scratch))
        lines = stale(readme, values)
        if args.check:
            print("\n".join(lines) if lines else "README.md's figures and pictures are current.")
            return 1 if lines else 0
        if unmarked(readme, values):
            print("\n".join(unmarked(readme, values)), file=sys.stderr)
            return 1
        retake(Path(scratch))
    README.write_text(rewritten(readme, values), encoding="utf-8")
    print("Brought up to date:\n  " + "\n  ".join(lines) if lines else "No figure changed.")
    print(f"Pictures retaken: {', '.join(PICTURES)}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
