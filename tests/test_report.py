"""The class report: a self-contained page that a real browser renders with its plots, and a CSV.

The page is checked in headless Chromium (Debian's `chromium`): every image must decode from its
data URI, and a screenshot must show more than a blank page. Without Chromium those checks skip,
except under CI=true, where they fail. QKV_REPORT_SCREENSHOT=path keeps the screenshot of the sample
class's report: data/readme_figures.py sets it to retake the README's data/report/sample-class.png.
"""
from __future__ import annotations

import base64
import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from support import IN_CI, REPO, REPORT_RUN, qkv_grade, readme_figures, reference_source, require_readme_shows

from autograder.diagnoses import CODES
from autograder.results import StepResult
from autograder.results import SubmissionResult, unreadable
from autograder.steps import STEP_IDS, STEPS

SAMPLE = REPO / "data" / "sample-class"
PNG = b"\x89PNG\r\n\x1a\n"
WIDTH = 1100  # of the browser window, in CSS pixels


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    done = qkv_grade(str(SAMPLE), *REPORT_RUN, "--format", "json",
                     "--out", str(out / "results"), "--report", str(out / "report"))
    assert done.returncode == 0, done.stderr
    return out / "report", json.loads(done.stdout)


class Page(HTMLParser):
    """Every element's tag and attributes, in order."""

    def __init__(self, text: str):
        super().__init__()
        self.elements: list[tuple[str, dict]] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))

    def all(self, tag: str) -> list[dict]:
        return [attrs for name, attrs in self.elements if name == tag]


def test_the_csv_has_one_row_per_student_with_every_steps_score(report):
    folder, results = report
    rows = list(csv.reader((folder / "scores.csv").open(encoding="utf-8")))
    assert rows[0] == ["submission", "total", "max", *STEP_IDS]
    assert len(rows) == len(results) + 1
    for row, result in zip(rows[1:], results):
        assert row[0] == result["submission"]
        assert [float(x) for x in row[1:]] == [result["score"], result["max_score"]] + [
            step["score"] for step in result["steps"]]


def test_the_readmes_picture_of_the_report_shows_this_report(report):
    """The README's data/report/sample-class.png is a screenshot of this very page: the digest
    beside it must be this page's (data/readme_figures.py retakes it when it is not)."""
    folder, _ = report
    figures = readme_figures()
    page = (folder / "index.html").read_text(encoding="utf-8")
    require_readme_shows({figures.REPORT_PICTURE: figures.report_digest(page)})


def test_the_page_is_self_contained_its_plots_embedded_as_png(report):
    folder, _ = report
    text = (folder / "index.html").read_text(encoding="utf-8")
    page = Page(text)
    images = page.all("img")
    assert len(images) == 3 and all(image["alt"] for image in images)
    for image in images:
        assert image["src"].startswith("data:image/png;base64,")
        assert base64.b64decode(image["src"].split(",", 1)[1]).startswith(PNG)
    assert not page.all("script") and not page.all("link") and not page.all("iframe")
    assert not [attrs for _, attrs in page.elements for key, value in attrs.items()
                if key in ("src", "href") and not value.startswith("data:")]
    policy = [m["content"] for m in page.all("meta") if m.get("http-equiv") == "Content-Security-Policy"]
    assert policy and "default-src 'none'" in policy[0] and "img-src data:" in policy[0]


def test_each_misconception_lists_its_students_and_what_they_read(report):
    folder, results = report
    text = (folder / "index.html").read_text(encoding="utf-8")
    sections = dict(re.findall(r'<section class="code[^"]*"><h3><code>([^<]+)</code>(.*?)</section>', text, re.S))
    expected: dict[str, set[str]] = {}
    for result in results:
        for step in result["steps"]:
            for code in step["diagnoses"]:
                expected.setdefault(code, set()).add(result["submission"])
    assert "keys-not-transposed" in expected and "timeout" in expected
    assert set(sections) == set(expected)
    for code, students in expected.items():
        assert all(f"<li>{name} " in sections[code] for name in students)
        assert f"{len(students)} student" in sections[code]
        assert CODES[code].what[1:] in sections[code].replace("&#x27;", "'")


def _result(name: str, code: str) -> SubmissionResult:
    steps = [StepResult(step.id, step.points, step.points, "passed", "", [], 1, 1) for step in STEPS]
    steps[1] = StepResult("scores", 0.0, steps[1].max_score, "failed", "", [code], 0, 1)
    return SubmissionResult(name, steps, seed=3, isolation="landlock")


def test_every_share_is_of_the_whole_class_unreadable_files_included():
    from autograder.report import render

    text = render([_result("ann.py", "keys-not-transposed"), _result("bea.py", "keys-not-transposed"),
                   _result("cal.py", "scaled-by-d_k"), unreadable("dot.py", "not UTF-8 text", 3, "landlock")])
    assert "keys-not-transposed</code>: 2 students (50%)" in text and "scaled-by-d_k</code>: 1 student (25%)" in text
    scores_row = re.search(r"<tr><td><code>scores</code>.*?</tr>", text).group(0)
    assert scores_row.endswith('<td class="n">0%</td></tr>')
    qkv_row = re.search(r"<tr><td><code>qkv</code>.*?</tr>", text).group(0)
    assert qkv_row.endswith('<td class="n">75%</td></tr>')  # 3 of the 4 files


def test_student_controlled_names_are_escaped():
    from autograder.report import render

    hostile = '<img src=x onerror="alert(1)">&co.py'
    text = render([_result(hostile, "keys-not-transposed"),
                   unreadable("<script>x</script>.ipynb", "<b>corrupt</b> notebook", 3, "landlock")])
    assert hostile not in text and "<script>x" not in text and "<b>corrupt" not in text
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;co.py" in text
    assert "&lt;script&gt;x&lt;/script&gt;.ipynb" in text
    assert all(image["src"].startswith("data:image/png;base64,") for image in Page(text).all("img"))


def test_grading_never_imports_matplotlib_and_a_report_needs_a_folder(tmp_path):
    probe = ("import sys, autograder.cli, autograder.report, autograder.gradescope; "
             "print('matplotlib' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert done.stdout.strip() == "False", done.stderr
    (tmp_path / "alice.py").write_text(reference_source())
    done = qkv_grade("alice.py", "--report", "out", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.strip() == "qkv-grade: error: --report needs a folder of submissions"


# ------------------------------------------------------------------ in a real browser -----------


def _chromium() -> str:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        message = "needs Chromium (apt-get install chromium)"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)
    return browser


def _headless(browser: str, profile, *args: str) -> subprocess.CompletedProcess:
    # The background-networking flags keep Chromium from reaching for the network at start-up.
    return subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                           f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=120)


# Added only to a copy of the page: it records what the browser made of every image.
MEASURE = """<script>
window.addEventListener("load", () => {
  const images = [...document.images].map(i => ({src: i.src.slice(0, 22), width: i.naturalWidth,
                                                 complete: i.complete}));
  const probe = document.createElement("pre");
  probe.id = "probe";
  probe.textContent = JSON.stringify({images, height: document.documentElement.scrollHeight});
  document.body.appendChild(probe);
});
</script>"""


def test_the_page_renders_in_chromium_with_every_image(report, tmp_path):
    browser = _chromium()
    folder, _ = report
    text = (folder / "index.html").read_text(encoding="utf-8")
    # The copy's policy still allows images only from data URIs, so a loaded image proves one.
    measured = text.replace("style-src 'unsafe-inline'", "style-src 'unsafe-inline'; script-src 'unsafe-inline'")
    measured = measured.replace("</body>", MEASURE + "</body>")
    (tmp_path / "measured.html").write_text(measured, encoding="utf-8")
    done = _headless(browser, tmp_path / "profile-dom", f"--window-size={WIDTH},800", "--virtual-time-budget=10000",
                     "--dump-dom", (tmp_path / "measured.html").as_uri())
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.S)
    assert found, done.stderr[-2000:]
    probe = json.loads(found.group(1))
    assert len(probe["images"]) == 3
    for image in probe["images"]:
        assert image["src"] == "data:image/png;base64," and image["complete"] and image["width"] > 300

    shot = tmp_path / "report.png"
    done = _headless(browser, tmp_path / "profile-shot", f"--window-size={WIDTH},{probe['height']}",
                     f"--screenshot={shot}", (folder / "index.html").as_uri())
    assert shot.is_file(), done.stderr[-2000:]
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)[..., :3]
    ink = (pixels < 0.9).any(axis=-1)
    assert ink.mean() > 0.03, "the screenshot is nearly blank"
    colours = {tuple(row) for row in (pixels[ink][::7] * 255).astype(int)}
    assert len(colours) > 50
    keep = os.environ.get("QKV_REPORT_SCREENSHOT")
    if keep:
        shutil.copyfile(shot, keep)


@pytest.mark.parametrize("kind", ["fifo", "zero", "escapes"])
def test_a_matplotlibrc_in_the_class_folder_is_never_read(tmp_path, kind):
    """A `matplotlibrc` that is a FIFO (which would hang the run, whose report is written with
    Ctrl-C deferred), a link to /dev/zero (which would fill its memory), or a key that prints raw
    terminal escapes in matplotlib's warning: matplotlib is loaded from the root folder, and reads
    none of them."""
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "alice.py").write_text(reference_source())
    rc = folder / "matplotlibrc"
    if kind == "fifo":
        os.mkfifo(rc)
    elif kind == "zero":
        rc.symlink_to("/dev/zero")
    else:
        rc.write_text("\x1b[31mRED\x1b[0m\x1b]0;retitled\x07 : 1\n")
    done = qkv_grade(".", "--seed", "3", "--out", str(tmp_path / "results"), "--report", str(tmp_path / "report"),
                     cwd=folder, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "report" / "index.html").is_file()
    assert "\x1b" not in done.stderr and "\x1b" not in done.stdout, done.stderr[-2000:]


def test_a_matplotlibrc_in_the_class_folder_changes_nothing_in_the_report(tmp_path):
    """matplotlib reads a `matplotlibrc` in the folder it starts in before any other: a student's,
    run from the class's folder, asked for LaTeX (and ended the run where there is none) or set the
    report's look. The report is drawn with matplotlib's own defaults and the report's settings."""
    folder = tmp_path / "class"
    folder.mkdir()
    (folder / "alice.py").write_text(reference_source())
    (folder / "matplotlibrc").write_text("text.usetex: True\nfont.size: 40\naxes.facecolor: red\n"
                                        "savefig.dpi: 9\nbackend: TkAgg\n")
    done = qkv_grade(".", "--seed", "3", "--out", str(tmp_path / "results"), "--report", str(tmp_path / "report"),
                     cwd=folder)
    assert done.returncode == 0, done.stderr[-2000:]
    page = (tmp_path / "report" / "index.html").read_text()
    pictures = [base64.b64decode(src.split(",", 1)[1]) for src in re.findall(r'src="(data:image/png;base64,[^"]+)"', page)]
    assert pictures and all(picture.startswith(PNG) for picture in pictures)
    probe = ("import os; os.chdir(%r); from autograder.report import _pyplot; plt = _pyplot(); "
             "print(plt.rcParams['text.usetex'], plt.rcParams['font.size'], plt.rcParams['axes.facecolor'])" % str(folder))
    shown = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert shown.stdout.split() == ["False", "10.0", "white"], shown.stderr[-2000:]
