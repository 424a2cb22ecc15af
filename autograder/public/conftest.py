"""pytest settings for the local self-check: which file is checked, and what to do next."""
import textwrap
from pathlib import Path

import pytest

import public_checks

WIDTH = 96  # the summary's line length


def pytest_addoption(parser):
    parser.addoption("--submission", metavar="PATH",
                     help="check this file instead, for example attention_head.ipynb")


def _chosen(config):
    """The file named by --submission, or attention_head.py, or attention_head.ipynb."""
    option = config.getoption("submission")
    if option:
        return Path(config.invocation_params.dir, option).resolve()
    return public_checks.submission_path()


@pytest.fixture(scope="session")
def submission(pytestconfig):
    """The student's module, or the notebook's code cells but its checks and plot."""
    return public_checks.load_submission(_chosen(pytestconfig))


def pytest_report_header(config):
    path = _chosen(config)
    checked = path.name if path else "nothing (no attention_head.py or attention_head.ipynb here)"
    return f"Chapter 15 self-check: {checked}, on the chapter's worked example only"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    stats = terminalreporter.stats
    outcomes, empty = {}, None
    for key in ("passed", "failed", "skipped"):
        for report in stats.get(key, []):
            properties = dict(getattr(report, "user_properties", ()))
            if "step" in properties and report.when == "call":
                outcomes[properties["step"]] = properties.get("status", key)
            if "empty_answers" in properties:
                empty = properties["empty_answers"]

    steps = public_checks.steps()
    write = terminalreporter.write_line
    terminalreporter.section("Chapter 15 self-check")
    if stats.get("error"):
        write("Some checks could not run at all; the errors above say why.")
    if not outcomes:
        return
    passed = [step for step, status in outcomes.items() if status == "passed"]
    if len(passed) == len(outcomes):
        ran = ("every step" if len(outcomes) == len(steps)
               else f"{len(outcomes)} of {len(steps)} steps")
        write(f"The public checks on the chapter's example passed ({ran}).")
        write(textwrap.fill("The hidden graders test more: other shapes and widths, scores in the "
                            "thousands, batches, and other exercise situations. Keep your "
                            "functions general.", width=WIDTH))
    else:
        write(f"Public checks on the chapter's example: {len(passed)} of {len(outcomes)} steps "
              f"match.")
        missing = [step for step, status in outcomes.items() if status == "not_implemented"]
        if missing:
            write(textwrap.fill(f"Not implemented yet: {', '.join(missing)}", width=WIDTH,
                                subsequent_indent="  "))
        never = [step for step, status in outcomes.items() if status == "never_defined"]
        if never:
            write(textwrap.fill(f"Never defined (a notebook cell that stopped first, or a %%timeit cell): "
                                f"{', '.join(never)}",
                                width=WIDTH, subsequent_indent="  "))
        path = _chosen(config)
        notebook = public_checks.HERE / public_checks.NOTEBOOK
        if len(missing) == len(outcomes) and path is not None and path.suffix == ".py" \
                and notebook.is_file():
            write(textwrap.fill(f"This checked {path.name}, which is still untouched. If you work "
                                f"in the notebook, check it instead: pytest --submission="
                                f"{public_checks.NOTEBOOK}", width=WIDTH))
        wrong = [step for step, status in outcomes.items()
                 if status not in ("passed", "not_implemented", "never_defined")]
        if wrong:
            write("Look again at:")
            width = max(len(step) for step in wrong)
            for step in wrong:
                line = f"  {step:<{width}}  {steps[step].title}: reread {steps[step].section}"
                # as the step's own message says: the first failing steps it builds on, directly or not
                failing = [use for use in public_checks._all_uses(step)
                           if outcomes.get(use, "passed") != "passed"]
                earlier = [use for use in failing
                           if not set(public_checks._all_uses(use)) & set(failing)]
                if earlier:
                    line += f" (the chapter's solution builds on {', '.join(earlier)}: fix that first)"
                write(line)
    if empty:
        write(f"Written answers still empty: {empty}")
