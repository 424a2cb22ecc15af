"""The in-kernel side of the nbgrader course: what a check cell's hidden line calls.

In the source notebook each check cell reads

    ### BEGIN HIDDEN TESTS
    from autograder.nbgrader_hook import check
    ### END HIDDEN TESTS
    check("softmax", softmax_rows)

In the release the hidden line is gone and `check` is the public one, which raises when the
chapter's example comes out wrong. Under `nbgrader autograde` the hidden line rebinds `check` to
the function below. It grades the code this kernel has run so far (its input history, less the
check cells) with the hidden graders in the isolated runner, prints the step's feedback (the text
`qkv-grade` gives) and returns the step's score, which nbgrader takes as the cell's partial credit.
It never raises and never writes to stderr: nbgrader scores a test cell with an error or any stderr
output 0.

Everything here runs in the student's own kernel, so a submission can defeat it (for instance by
planting a module under this name). The grade to trust is `qkv-grade --nbgrader`; this hook only
makes `nbgrader autograde` and its feedback say the same thing for honest work.
"""
from __future__ import annotations

import atexit
import warnings
from pathlib import Path

HOOK = __name__  # a cell mentioning this module is a check cell: never part of the student's code

_state: dict = {}  # for the kernel's life: the grader, its worker, the last result


def check(step_id: str, *functions) -> float:
    """Grade step `step_id` on the code run so far; print its feedback and return its score.

    The functions are accepted (the cell passes the public check's arguments) and not called:
    the hidden graders call the student's code only in the isolated runner.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return _check(step_id)
    except BaseException as error:  # a test cell must show no traceback of the grader's code
        print(f"{step_id}: could not be graded in this kernel ({type(error).__name__}). "
              f"The instructor's trusted grading decides this step.")
        return 0.0


def _check(step_id: str) -> float:
    from .steps import BY_ID

    if step_id not in BY_ID:
        print(f"{step_id}: not a step of this assignment.")
        return 0.0
    result = _grade(_executed_cells())
    step = next(step for step in result.steps if step.id == step_id)
    codes = f" [{', '.join(step.diagnoses)}]" if step.diagnoses else ""
    print(f"{step.id}: {step.score:g} / {step.max_score:g}, {step.status}{codes}")
    print(step.feedback)
    return step.score


def _executed_cells() -> list[str]:
    """The cells this kernel has run, in order, made ready for the runner as a notebook's are."""
    import nbformat
    from IPython import get_ipython

    from .nbgrader_course import NOTEBOOK
    from .submission import notebook_cells

    shell = get_ipython()
    history = shell.history_manager.input_hist_raw if shell is not None else []
    cells = [nbformat.v4.new_code_cell(source) for source in history
             if source.strip() and HOOK not in source]
    notebook = nbformat.v4.new_notebook(cells=cells)
    return notebook_cells(nbformat.writes(notebook), Path(NOTEBOOK))


def _grade(cells: list[str]):
    from .grading import Grader
    from .nbgrader_course import NOTEBOOK, course_key, course_seed, find_course
    from .runner import Worker
    from .submission import Submission

    course = find_course(Path.cwd())
    seed, case_key = course_seed(course), course_key(course)
    key = (seed, case_key, tuple(cells))
    if _state.get("key") == key:  # several check cells in a row see the same code
        return _state["result"]
    if _state.get("seed") != (seed, case_key):
        _close()
        _state["grader"] = Grader(seed, key=case_key)
        _state["seed"] = (seed, case_key)
    if "worker" not in _state:
        _state["worker"] = Worker(_state["grader"].limits)
        if not _state.get("closing"):
            atexit.register(_close)
            _state["closing"] = True
    submission = Submission(Path(NOTEBOOK), NOTEBOOK, tuple(cells), True)
    result = _state["grader"].grade(_state["worker"], submission)
    _state.update(key=key, result=result)
    return result


def _close() -> None:
    worker = _state.pop("worker", None)
    if worker is not None:
        worker.close()
    _state.pop("key", None)
