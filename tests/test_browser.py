"""What students and instructors see, in a real browser: JupyterLab with nbgrader's extensions,
formgrader and a feedback page, driven by Playwright on the system's Chromium.

Each assertion is about what a person sees on the page: no traceback frames of the checking code,
no hidden-test line or hook import, the misconception named, and no clipped line (an output
area's scroll width within its client width). Servers listen on 127.0.0.1 only. Screenshots go
to $QKV_SCREENSHOTS when it is set, else to a temporary folder: data/readme_figures.py sets it to
retake the README's pictures.
"""
from __future__ import annotations

import functools
import http.server
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from support import FEEDBACK_COURSE_SEED, IN_CI, REPO, SAMPLE_NOTEBOOK, jupyter_env

# Under pytest-xdist, one worker runs the module: its Chromium, JupyterLab servers and course start once.
pytestmark = pytest.mark.xdist_group("browser")

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ASSIGNMENT = "ps1"
NOTEBOOK = "attention_head.ipynb"
RELEASE = REPO / "assignments" / "attention_head"
OUR_FRAMES = ("Traceback", "public_checks.py", "nbgrader_hook", "File \"", "site-packages")
HIDDEN = ("HIDDEN TESTS", "nbgrader_hook", "autograder")
STEP_COUNT = 13

if not Path(CHROMIUM).is_file():
    if IN_CI:
        pytest.fail(f"needs Chromium at {CHROMIUM} (apt-get install chromium)", pytrace=False)
    pytest.skip(f"needs Chromium at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)

from playwright.sync_api import expect, sync_playwright  # noqa: E402


# --- the browser and the servers ----------------------------------------------------------------

@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("QKV_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True,
            viewport={"width": 1280, "height": 900})
        yield context
        context.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Lab:
    """JupyterLab, with nbgrader's extensions, serving `folder` on 127.0.0.1."""

    def __init__(self, folder: Path, root: Path):
        self.token = secrets.token_hex(16)
        self.env = jupyter_env(root)
        self.env.pop("MPLBACKEND")  # the kernel draws inline, as a student's does
        # Every cell stays in the page (no windowing), and JupyterLab asks no news server.
        settings = root / "lab-settings"
        for name, values in (("notebook-extension/tracker", '{"windowingMode": "none"}'),
                             ("apputils-extension/notification", '{"fetchNews": "false"}')):
            target = settings / "@jupyterlab" / f"{name}.jupyterlab-settings"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(values, encoding="utf-8")
        self.env["JUPYTERLAB_SETTINGS_DIR"] = str(settings)
        # The free port may be taken before JupyterLab binds it (another worker, another suite):
        # then it exits, rather than serve on the next port this page never asks, and gets another.
        for _ in range(5):
            self.port = _free_port()
            self.process = subprocess.Popen(
                [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ServerApp.ip=127.0.0.1",
                 f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
                 f"--IdentityProvider.token={self.token}",
                 f"--ServerApp.root_dir={folder}", "--LabApp.expose_app_in_browser=True",
                 *(["--allow-root"] if os.geteuid() == 0 else [])],  # CI's containers run as root
                cwd=folder, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if self._started(deadline=time.monotonic() + 90):
                return
            if self.process.poll() is None:  # still starting after 90 s: no other port will help
                break
        self.close()
        raise RuntimeError("JupyterLab did not start")

    def _started(self, deadline: float) -> bool:
        """Whether this server answers with this token before `deadline`; False once it has exited."""
        while True:
            try:
                urllib.request.urlopen(self.url("api/status"), timeout=2)
                return True
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    return False
                time.sleep(0.5)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}/{path}?token={self.token}"

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _unclipped(page, selector: str) -> list[str]:
    """The texts of the elements matching `selector` whose lines are cut at the right edge."""
    return page.eval_on_selector_all(
        selector, "els => els.filter(e => e.scrollWidth > e.clientWidth + 1)"
                  ".map(e => e.innerText.slice(0, 120))")


_SPLIT_WORDS = """els => {
  const split = [];
  for (const el of els) {
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const match of node.data.matchAll(/[^\\s\\-\\/]+/g)) {  // a hyphen or a slash may end a line
        const range = document.createRange();
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
        if (tops.size > 1 && range.getBoundingClientRect().width < el.clientWidth) split.push(match[0]);
      }
    }
  }
  return split;
}"""


def _split_words(page, selector: str) -> list[str]:
    """The words inside the elements matching `selector` that the page breaks across two lines
    although they would fit on one (a line may still end after a hyphen or a slash)."""
    return page.eval_on_selector_all(selector, _SPLIT_WORDS)


# --- the student's notebook ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def student_lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("student")
    folder = root / "work"
    shutil.copytree(RELEASE, folder / "stub")
    shutil.copytree(RELEASE, folder / "mistake")
    (folder / "mistake" / "attention_head.py").unlink()
    shutil.copyfile(SAMPLE_NOTEBOOK, folder / "mistake" / NOTEBOOK)  # with nbgrader's cell metadata
    lab = Lab(folder, root)
    yield lab, folder
    lab.close()


def _run_all(browser, lab: Lab, path: str):
    """Open a notebook in JupyterLab, Run All, and wait for the heatmap cell (the last code cell)."""
    page = browser.new_page()
    # A workspace of its own, so that the notebooks opened before do not come back with it.
    page.goto(lab.url(f"lab/workspaces/{secrets.token_hex(4)}/tree/{path}"))
    page.wait_for_function("window.jupyterapp && window.jupyterapp.shell.currentWidget"
                           " && window.jupyterapp.shell.currentWidget.sessionContext",
                           timeout=60_000)
    # As a person would: wait for the kernel, then Run All; the command ends when every cell ran.
    page.evaluate("""async () => {
        const panel = window.jupyterapp.shell.currentWidget;
        await panel.context.ready;
        await panel.sessionContext.ready;
        await window.jupyterapp.commands.execute('notebook:run-all-cells');
    }""")
    last = page.locator(".jp-CodeCell").last  # the heatmap cell: Run All got past every check
    expect(last.locator(".jp-InputArea-prompt")).to_have_text(re.compile(r"\[\d+\]"), timeout=60_000)
    expect(last.locator(".jp-OutputArea-output").first).to_be_visible(timeout=30_000)
    return page


def _check_outputs(page) -> list[str]:
    """What each check cell shows, in order (the cells that call check("…"))."""
    cells = page.locator(".jp-CodeCell", has_text=re.compile(r'check\("'))
    return [cells.nth(i).locator(".jp-OutputArea").inner_text() for i in range(cells.count())]


def test_run_all_on_the_stub_reaches_every_check_and_the_heatmap(browser, student_lab, shots):
    lab, _ = student_lab
    page = _run_all(browser, lab, f"stub/{NOTEBOOK}")
    outputs = _check_outputs(page)
    assert len(outputs) == STEP_COUNT
    assert all("not implemented yet" in text for text in outputs)
    assert not [frame for text in outputs for frame in OUR_FRAMES if frame in text]
    heatmap = page.locator(".jp-CodeCell").last.locator(".jp-OutputArea").inner_text()
    assert "No heatmap yet" in heatmap
    page.screenshot(path=str(shots / "notebook-stub.png"))
    page.close()


def test_run_all_with_one_mistake_names_it_without_our_frames_and_draws_a_truthful_heatmap(
        browser, student_lab, shots):
    lab, _ = student_lab
    page = _run_all(browser, lab, f"mistake/{NOTEBOOK}")
    outputs = dict(zip(("qkv", "scores", "scale", "softmax", "mix", "attention"), _check_outputs(page)))
    assert outputs["qkv"].startswith("✓ qkv")
    softmax = outputs["softmax"]
    assert softmax.startswith("✗ softmax")
    words = " ".join(softmax.split())  # the message is wrapped to fit Validate's report
    assert "what a known mistake does" in words and "normalize each row" in words
    assert outputs["attention"].startswith("✗ attention, as the chapter solves it, builds on softmax: fix that first.")
    assert not [frame for text in outputs.values() for frame in OUR_FRAMES if frame in text]
    assert _unclipped(page, ".jp-OutputArea-output") == []
    # The weights are column-normalized, so the title must not call them row-stochastic.
    last = page.locator(".jp-CodeCell").last
    expect(last.locator(".jp-OutputArea-output img")).to_be_visible()
    page.locator(".jp-CodeCell", has_text='check("softmax"').scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "notebook-softmax-check.png"))
    page.close()


def test_validate_reports_the_failing_checks_in_our_words(browser, student_lab):
    lab, _ = student_lab
    page = browser.new_page()
    page.goto(lab.url(f"lab/tree/mistake/{NOTEBOOK}"))
    page.wait_for_selector(".validate-button", timeout=60_000)
    page.locator(".validate-button").click()
    dialog = page.locator(".jp-Dialog-content")
    expect(dialog).to_contain_text("softmax", timeout=120_000)
    text = dialog.inner_text()
    assert "known mistake" in text
    assert not [frame for frame in OUR_FRAMES if frame in text]
    page.close()


# --- the instructor's side ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A course with the sample submission graded by `qkv-grade --nbgrader`, and its feedback."""
    root = tmp_path_factory.mktemp("course")
    env = jupyter_env(root)
    path = root / "course"

    def run(*argv, cwd=path):
        done = subprocess.run([sys.executable, "-m", *argv], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    run("autograder.nbgrader_course", str(path), "--seed", str(FEEDBACK_COURSE_SEED), cwd=root)
    run("nbgrader", "generate_assignment", ASSIGNMENT)
    submitted = path / "submitted" / "sample" / ASSIGNMENT
    shutil.copytree(path / "release" / ASSIGNMENT, submitted)
    shutil.copyfile(SAMPLE_NOTEBOOK, submitted / NOTEBOOK)
    run("autograder.cli", "--nbgrader", ".", ASSIGNMENT)
    run("nbgrader", "generate_feedback", ASSIGNMENT)
    return root, path


def test_the_feedback_page_names_steps_hides_the_hook_and_wraps_every_line(browser, course, shots):
    _, path = course
    folder = path / "feedback" / "sample" / ASSIGNMENT
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        page = browser.new_page()
        page.set_viewport_size({"width": 900, "height": 900})
        page.goto(f"http://127.0.0.1:{server.server_port}/attention_head.html")
        text = page.inner_text("body")
        assert not [marker for marker in HIDDEN if marker in text]
        assert not re.search(r"Out\[\s*\d*\]", text)
        assert "Step 4: Normalize each receiving row (softmax)" in page.inner_text("#toc")
        assert "column-normalized" in text
        assert _unclipped(page, "div.output_area pre, div.input_area pre") == []
        assert _split_words(page, "div.output_area pre") == []  # "eac h row", "unit-to tal" before
        # One status per written answer: the contents and the answer's own heading say the same.
        for number in range(1, 6):
            listed = re.search(rf"Exercise {number}: written answer \(Score: ([^)]*)\)", page.inner_text("#toc"))
            heading = page.locator(".nbgrader_cell .panel-heading", has_text=f"Exercise {number}: written answer")
            heading = heading.inner_text()
            assert listed and f"Score: {listed.group(1)}" in heading, (number, heading)
        page.locator("div.output_area", has_text="[column-normalized]").first.scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "feedback.png"))
        page.close()
    finally:
        server.shutdown()


@pytest.fixture(scope="module")
def formgrader(course):
    """One JupyterLab serving the course, and the address of the sample's grading view in it."""
    from nbgrader.api import Gradebook

    root, path = course
    with Gradebook(f"sqlite:///{path / 'gradebook.db'}") as gradebook:
        submission_id = gradebook.find_submission_notebook("attention_head", ASSIGNMENT, "sample").id
    lab = Lab(path, root)
    try:
        yield lab, lab.url(f"formgrader/submissions/{submission_id}/")
    finally:
        lab.close()


def _grading_view(browser, formgrader):
    """The sample's grading view, loaded, in a new page."""
    lab, address = formgrader
    page = browser.new_page()
    # formgrader's own API calls carry no token: send it with every request, as a login would.
    page.set_extra_http_headers({"Authorization": f"token {lab.token}"})
    page.goto(address)
    page.wait_for_selector("input.score", timeout=60_000)
    return page


def test_formgrader_shows_the_graded_notebook_and_takes_a_written_answers_score(browser, course, formgrader):
    from nbgrader.api import Gradebook

    _, path = course
    page = _grading_view(browser, formgrader)
    text = page.inner_text("body")
    assert not [marker for marker in HIDDEN if marker in text]
    assert "column-normalized" in text
    score = page.locator("input.score#answer-ANSWER_1")
    # A bound on the wait, not on formgrader's speed: with another worker and other jobs on two
    # cores, its request and the gradebook's commit have taken more than 30 s. The score is typed
    # again after 20 s unsaved, by way of another (a field only reports a change): on a loaded
    # machine, the first can come before the page's own handlers are ready to see it.
    page.wait_for_load_state("networkidle")
    deadline = time.monotonic() + 120
    typed = 0.0
    while True:
        if time.monotonic() - typed > 20:
            for value in ("1.5",) if not typed else ("1", "1.5"):
                score.fill(value)
                score.press("Tab")  # formgrader saves a score when the field loses focus
            typed = time.monotonic()
        with Gradebook(f"sqlite:///{path / 'gradebook.db'}") as gradebook:
            grade = gradebook.find_grade("answer-ANSWER_1", "attention_head", ASSIGNMENT, "sample")
            if grade.manual_score == 1.5:
                break
        assert time.monotonic() < deadline, "formgrader did not save the score"
        time.sleep(0.5)
    page.close()


def test_formgrader_wraps_every_line_of_feedback(browser, formgrader):
    page = _grading_view(browser, formgrader)
    # Every step's feedback is there to measure, so that no clipped line can hide by absence.
    outputs = page.locator("div.output_area pre")
    assert outputs.filter(has_text=re.compile(r"^\w+: [\d.]+ / \d+, ")).count() == STEP_COUNT
    assert _unclipped(page, "div.output_area pre") == []
    assert _split_words(page, "div.output_area pre") == []
    page.close()
