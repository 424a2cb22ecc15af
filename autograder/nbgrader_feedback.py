"""What people read of a graded notebook: the course's own nbgrader preprocessor and template.

A check cell of the course's source notebook carries a hidden line that imports the grading hook,
and under `nbgrader autograde` it echoes the step's score as its value (nbgrader's partial credit).
Neither is for a reader. `ReaderView` removes both once nbgrader has taken the score, keeps the
in-kernel scores in the notebook's metadata (where `qkv-grade --nbgrader` compares them with its
own) and gives each check cell its step's title. `configure` puts it into the course's
`nbgrader_config.py`: into autograde right after SaveAutoGrades, so formgrader and the feedback
both read the clean notebook, and into generate_feedback, with the `qkv_feedback` template beside
this module (step names in the contents, ungraded answers marked as such), and into formgrader's
grading view, with the `qkv_formgrade` template (nbgrader's `formgrade`; its folder holds only a
conf.json). Both templates add `WrapLines`, the styles that wrap every line of code and output
instead of cutting it off.
"""
from __future__ import annotations

import re
from pathlib import Path

from nbconvert import HTMLExporter
from nbconvert.preprocessors import Preprocessor
from nbgrader import utils
from nbgrader.preprocessors import NbGraderPreprocessor

from .steps import STEPS
from .submission import cell_grade_id, qkv_metadata

TEMPLATES = Path(__file__).resolve().parent / "nbgrader_templates"
TEMPLATE = "qkv_feedback"
FORMGRADE_TEMPLATE = "qkv_formgrade"
HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS\s*$.*?^[ \t]*### END HIDDEN TESTS[ \t]*\n?",
                    re.MULTILINE | re.DOTALL)
CHECK_TITLES = {f"check-{step.id}": f"Step {number}: {step.title} ({step.id})"
                for number, step in enumerate(STEPS, 1)}
STEP_OF_CHECK = {f"check-{step.id}": step.id for step in STEPS}
PLOT_CELL = "plot"  # the heatmap cell's id in the release
PLOT_KEPT = ("image/png",)  # what of its kernel output survives a trusted rewrite
# A line of code or output wraps instead of running past the page's right edge, where nbgrader's
# pages (bootstrap's `pre`, classic's scrolling output areas) cut it off.
WRAP_CSS = """\
div.output_area pre, div.input_area pre, div.output_subarea, div.text_cell_render pre {
  white-space: pre-wrap;
  overflow-wrap: anywhere;
  overflow-x: visible;
}
div.output_area img { max-width: 100%; height: auto; }
"""


def reader_view(notebook) -> dict[str, float]:
    """Make `notebook` what a reader should see, in place; returns the in-kernel step scores it
    found (nbgrader's reading of each check cell) before taking the scores out."""
    scores = {}
    for cell in notebook.cells:
        grade_id = cell_grade_id(cell)
        if cell.cell_type != "code" or grade_id not in STEP_OF_CHECK:
            continue
        cell.source = HIDDEN.sub("", cell.source)
        if any(output.output_type == "execute_result" for output in cell.get("outputs", [])):
            score, _ = utils.determine_grade(cell)
            scores[STEP_OF_CHECK[grade_id]] = float(score) if score is not None else 0.0
        cell.outputs = [output for output in cell.get("outputs", [])
                        if output.output_type != "execute_result"]
        cell.execution_count = None
        cell.metadata["qkv_title"] = CHECK_TITLES[grade_id]
    return scores


class ReaderView(NbGraderPreprocessor):
    """nbgrader's step for `reader_view`; also marks written answers no person has graded yet."""

    def preprocess(self, nb, resources):
        scores = reader_view(nb)
        if scores and "in_kernel" not in qkv_metadata(nb):
            nb.metadata["qkv"] = {**qkv_metadata(nb), "in_kernel": scores}
        pending = _ungraded(resources.get("nbgrader", {}))
        for cell in nb.cells:
            if cell_grade_id(cell) in pending:
                cell.metadata["qkv_pending"] = True
        return nb, resources


def _ungraded(info: dict) -> set[str]:
    """The grade ids of the notebook's cells that still wait for a person (in generate_feedback)."""
    if not {"db_url", "assignment", "student", "notebook"} <= set(info):
        return set()
    from nbgrader.api import Gradebook

    with Gradebook(info["db_url"]) as gradebook:
        submission = gradebook.find_submission_notebook(info["notebook"], info["assignment"],
                                                        info["student"])
        return {grade.name for grade in submission.grades if grade.needs_manual_grade}


class WrapLines(Preprocessor):
    """Adds WRAP_CSS to the styles a page inlines in its head (`resources.inlining.css`, which
    formgrader's grading view and nbgrader's feedback page both write out).

    Each of the course's templates lists it in its conf.json, so that it runs after the
    CSSHTMLHeaderPreprocessor of nbconvert's classic template, which starts those styles afresh.
    """

    def preprocess(self, nb, resources):
        resources.setdefault("inlining", {}).setdefault("css", []).append(WRAP_CSS)
        return nb, resources


class FeedbackExporter(HTMLExporter):
    """generate_feedback's exporter, so that the feedback template is its alone: formgrader
    renders with HTMLExporter's settings, whose template is `qkv_formgrade`."""


def configure(c) -> None:
    """Set the course's nbgrader configuration `c` to use the reader's view and templates."""
    import nbgrader
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import GetGrades, SaveAutoGrades

    steps = list(Autograde.class_traits()["autograde_preprocessors"].default())
    steps.insert(steps.index(SaveAutoGrades) + 1, ReaderView)
    c.Autograde.autograde_preprocessors = steps
    c.GenerateFeedback.preprocessors = [GetGrades, ReaderView, CSSHTMLHeaderPreprocessor]
    formgrader = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates"
    basedirs = [str(formgrader), str(TEMPLATES)]  # nbgrader's templates, then the course's
    c.GenerateFeedback.exporter_class = FeedbackExporter
    c.FeedbackExporter.template_name = TEMPLATE
    c.FeedbackExporter.template_file = f"{TEMPLATE}.html.j2"  # it extends nbgrader's index.html.j2
    c.FeedbackExporter.extra_template_basedirs = basedirs
    # Formgrader renders a submission with a plain HTMLExporter made from this configuration.
    c.HTMLExporter.template_name = FORMGRADE_TEMPLATE
    c.HTMLExporter.extra_template_basedirs = basedirs
