"""The local self-check: one test per graded step, on the chapter's worked example only.

Run `pytest` in this folder. Each test's id is a step id; its message says what was called, what
came back, what the chapter expects and which section to reread.
"""
import pytest

import public_checks


@pytest.mark.parametrize("step_id", public_checks.step_ids(), ids=str)
def test_step(step_id, submission, record_property):
    record_property("step", step_id)
    if submission.error:
        record_property("status", "failed")
        pytest.fail(f"{step_id}: {submission.error}", pytrace=False)
    outcome = public_checks.run_step(step_id, submission.namespace)
    record_property("status", outcome.status)
    if outcome.status != "passed":
        stopped = "".join(f"\n  {line}" for line in submission.stopped)
        message = outcome.message
        functions = public_checks.steps()[step_id].functions
        never = [name for name in functions if name in submission.unreached]
        timed = [name for name in functions if name in submission.discarded]
        if outcome.status == "not_implemented" and never:  # written, in a cell that stopped before its def
            record_property("status", "never_defined")
            message = (f"{step_id}: never defined: the notebook cell that would define {', '.join(never)} "
                       f"stopped with an error first (below).")
        elif outcome.status == "not_implemented" and timed:  # written in a %%timeit cell only
            record_property("status", "never_defined")
            message = (f"{step_id}: never defined: {', '.join(timed)} is defined only in a %%timeit cell, whose "
                       f"definitions IPython discards once the cell ends. Define it in a cell of its own.")
        pytest.fail(message + (f"\nCells of your notebook that stopped with an error (the hidden "
                                       f"graders run them alike):{stopped}" if stopped else ""), pytrace=False)


def test_written_answers_are_filled_in(submission, record_property):
    if submission.error:
        pytest.fail(submission.error, pytrace=False)
    if submission.kind == "notebook":
        pytest.skip("in the notebook the written answers are markdown cells, read by a person")
    empty = public_checks.empty_answers(submission.namespace)
    if empty:
        record_property("empty_answers", ", ".join(empty))
        pytest.fail(f"Written answers still empty: {', '.join(empty)}. Replace each empty string "
                    f"with a few sentences of your own (§15.8); a person reads them.",
                    pytrace=False)
