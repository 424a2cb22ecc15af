"""The class report: how a whole class did, for the instructor planning the next lecture.

`write()` puts two files in a folder: `index.html`, one self-contained page (its plots are PNGs
embedded as data URIs, and its Content-Security-Policy lets a browser load nothing else), and
`scores.csv`, one row of per-step scores per student for an LMS or a spreadsheet. The page shows
the score distribution, the share of the class that passed each step, how often each diagnosis
appeared, and for each one which students showed it. Every string that comes from a submission
is escaped. matplotlib is imported here, inside functions, and only when a report is written:
grading never pays for it.
"""
from __future__ import annotations

import base64
import io
import os
import sys
from collections import Counter
from html import escape
from pathlib import Path

from .diagnoses import CODES, describe
from .results import SubmissionResult, printable, printable_name, spreadsheet_cell, spreadsheet_csv
from .steps import STEPS

# Diagnoses that say the code did not run to an answer, rather than which idea went wrong.
FAULTS = frozenset({"not-implemented", "timeout", "exit-called", "crashed", "memory-limit", "unreadable"})

# Okabe-Ito colours: distinguishable with the common colour-vision deficiencies.
COLOURS = {"passed": "#009E73", "partial": "#E69F00", "failed": "#D55E00", "not_implemented": "#999999",
           "misconception": "#0072B2", "fault": "#999999"}
# How each step status is counted in the per-step chart.
BUCKETS = {"passed": "passed", "partial": "partial", "failed": "failed", "error": "failed",
           "timeout": "failed", "not_implemented": "not_implemented"}
BUCKET_NAMES = {"passed": "passed", "partial": "partial credit", "failed": "failed, crashed or timed out",
                "not_implemented": "not implemented"}


def write(results: list[SubmissionResult], folder: Path) -> Path:
    """Write index.html and scores.csv into `folder`; returns the page's path."""
    from .store import own_folder, write_atomically

    own_folder(folder, "report folder")
    # written whole, then renamed over whatever stands there: a link put in the folder is replaced,
    # never written through
    write_atomically(folder / "scores.csv", scores_csv(results))
    page = folder / "index.html"
    write_atomically(page, render(results))
    return page


def scores_csv(results: list[SubmissionResult]) -> str:
    """One row per student: submission, total, max, then the score of every step, by step id."""
    return spreadsheet_csv([["submission", "total", "max"] + [step.id for step in STEPS]]
                           + [[spreadsheet_cell(result.submission, name=True), f"{result.score:g}", f"{result.max_score:g}"]
                              + [f"{step.score:g}" for step in result.steps] for result in results])


# ------------------------------------------------------------------ what the page counts ---------


def step_counts(results: list[SubmissionResult]) -> dict[str, Counter]:
    """For each step id, how many students fall in each bucket (passed, partial, failed, not implemented)."""
    counts = {step.id: Counter() for step in STEPS}
    for result in results:
        for step in result.steps:
            counts[step.id][BUCKETS[step.status]] += 1
    return counts


def diagnosed(results: list[SubmissionResult]) -> dict[str, dict[str, list[str]]]:
    """For each diagnosis code, each student who showed it and the steps where it showed.

    Submissions that could not be read at all are left out: nothing of them ran. Codes come most
    frequent first; at equal counts misconceptions before faults, then in the order of diagnoses.CODES.
    """
    found: dict[str, dict[str, list[str]]] = {}
    for result in results:
        if result.error:
            continue
        for step in result.steps:
            for code in step.diagnoses:
                found.setdefault(code, {}).setdefault(result.submission, []).append(step.id)
    order = list(CODES)
    return dict(sorted(found.items(), key=lambda item: (-len(item[1]), item[0] in FAULTS,
                                                         order.index(item[0]) if item[0] in order else len(order))))


def _derived_info(code: str):
    """A derived edit's explanation (derived.py), or None for a code no longer known."""
    try:
        return describe(code)
    except KeyError:
        return None


# ------------------------------------------------------------------ the plots --------------------


def _pyplot():
    matplotlib = _matplotlib()
    matplotlib.rcdefaults()  # the instructor's own settings aside, too: the report looks the same everywhere
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 10, "axes.spines.top": False, "axes.spines.right": False})
    return plt


def _matplotlib():
    """matplotlib, loaded from the root folder. As it loads it reads a `matplotlibrc` in the current
    folder before any other: started in a class's folder, a student's would be read, one named so
    that is a FIFO would hang the run, a link to /dev/zero fill its memory, and a bad key print raw
    terminal escapes. Only root can write in `/`."""
    if "matplotlib" in sys.modules:
        return sys.modules["matplotlib"]
    try:
        here = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # a folder this user may enter but not list: back by its name
        here = None
    try:
        back = os.getcwd() if here is None else None
    except OSError:  # removed meanwhile: nowhere to go back to, and nothing to read there
        back = None
    try:
        os.chdir("/")
        import matplotlib
    finally:
        if here is not None:
            os.fchdir(here)
            os.close(here)
        elif back is not None:
            os.chdir(back)
    return matplotlib


def _png(fig) -> str:
    """The figure as a data URI; closes it."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight", metadata={"Software": None})
    fig.clear()
    import matplotlib.pyplot as plt

    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def score_histogram(results: list[SubmissionResult]) -> str:
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    scores = [result.score for result in results]
    top = max(result.max_score for result in results)
    fig, ax = plt.subplots(figsize=(7.5, 2.8))
    bins = [top * i / 10 for i in range(11)]
    ax.hist(scores, bins=bins, color=COLOURS["misconception"], edgecolor="white")
    mean = sum(scores) / len(scores)
    ax.axvline(mean, color="#333333", linestyle="--", linewidth=1)
    ax.annotate(f"mean {mean:.1f}", (mean, 1), xycoords=("data", "axes fraction"), xytext=(0, 3),
                textcoords="offset points", ha="center", va="bottom", fontsize=9)
    ax.set_xlim(0, top)
    ax.set_xticks(bins)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(f"score (out of {top:g})")
    ax.set_ylabel("students")
    return _png(fig)


def step_chart(results: list[SubmissionResult]) -> str:
    plt = _pyplot()
    counts = step_counts(results)
    total = len(results)
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    labels = [step.id for step in STEPS][::-1]
    left = [0.0] * len(labels)
    for bucket, name in BUCKET_NAMES.items():
        shares = [100.0 * counts[step_id][bucket] / total for step_id in labels]
        ax.barh(labels, shares, left=left, color=COLOURS[bucket], label=name, height=0.7)
        left = [a + b for a, b in zip(left, shares)]
    for y, step_id in enumerate(labels):
        ax.text(101, y, f"{100.0 * counts[step_id]['passed'] / total:.0f}% passed", va="center", fontsize=9)
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the class (%)")
    ax.legend(ncols=4, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False, fontsize=9)
    return _png(fig)


def diagnosis_chart(found: dict[str, dict[str, list[str]]]) -> str:
    plt = _pyplot()
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    codes = list(found)[::-1]
    fig, ax = plt.subplots(figsize=(7.5, 0.9 + 0.32 * len(codes)))
    bars = ax.barh(codes, [len(found[code]) for code in codes], height=0.65,
                   color=[COLOURS["fault" if code in FAULTS else "misconception"] for code in codes])
    ax.bar_label(bars, padding=3, fontsize=9)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("students")
    ax.legend(handles=[Patch(color=COLOURS["misconception"], label="misconception"),
                       Patch(color=COLOURS["fault"], label="code that did not run to an answer")],
              ncols=2, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False, fontsize=9)
    return _png(fig)


# ------------------------------------------------------------------ the page ---------------------


def _e(value) -> str:
    return escape(str(value), quote=True)


def _img(uri: str, alt: str) -> str:
    return f'<img src="{uri}" alt="{_e(alt)}">'


def render(results: list[SubmissionResult]) -> str:
    """The whole page as one string. `results` must not be empty."""
    total = len(results)
    scores = sorted(result.score for result in results)
    top = max(result.max_score for result in results)
    seeds = sorted({result.seed for result in results})
    median = (scores[(total - 1) // 2] + scores[total // 2]) / 2
    full = sum(score == top for score in scores)
    counts = step_counts(results)
    found = diagnosed(results)

    parts = [_HEAD, "<h1>Chapter 15, Self-Attention and Q/K/V: class report</h1>",
             f"<p class=\"lead\">{total} submission{'s' if total != 1 else ''}, graded with seed "
             f"{_e(', '.join(map(str, seeds)))}. Mean {sum(scores) / total:.1f}, median {median:g}, "
             f"lowest {scores[0]:g}, highest {scores[-1]:g} (of {top:g}); {full} with full marks.</p>"]

    parts.append("<h2>Scores</h2>")
    parts.append(_img(score_histogram(results), "Histogram of the class's scores"))

    parts.append("<h2>Steps</h2>")
    parts.append("<p>The share of the class that passed each step; a step scores partial credit when "
                 "some of its cases pass.</p>")
    parts.append(_img(step_chart(results), "Share of the class that passed each step"))
    rows = []
    for step in STEPS:
        c = counts[step.id]
        rows.append(f"<tr><td><code>{_e(step.id)}</code></td><td>{_e(step.title)}</td><td>{_e(step.section)}</td>"
                    f"<td class=\"n\">{c['passed']}</td><td class=\"n\">{c['partial']}</td>"
                    f"<td class=\"n\">{c['failed']}</td><td class=\"n\">{c['not_implemented']}</td>"
                    f"<td class=\"n\">{100.0 * c['passed'] / total:.0f}%</td></tr>")
    parts.append("<table><thead><tr><th>step</th><th>title</th><th>section</th><th class=\"n\">passed</th>"
                 "<th class=\"n\">partial</th><th class=\"n\">failed</th><th class=\"n\">not implemented</th>"
                 "<th class=\"n\">share passed</th></tr></thead><tbody>"
                 + "".join(rows) + "</tbody></table>")

    parts.append("<h2>Misconceptions</h2>")
    if found:
        parts.append("<p>How many students showed each diagnosis, in any step, and what share of the class "
                     "they are. Below the chart, each "
                     "diagnosis with the explanation its students read and who they are.</p>")
        parts.append(_img(diagnosis_chart(found), "How many students showed each diagnosis"))
        for code, students in found.items():
            info = CODES.get(code) or _derived_info(code)
            share = 100.0 * len(students) / total  # of the class, as the steps' shares are
            what = f"{info.what[0].upper()}{info.what[1:]}" if info else "No explanation is recorded for this code."
            reread = f" Reread {_e(info.section)}." if info and info.section else ""
            kind = "fault" if code in FAULTS else "misconception"
            items = "".join(f"<li>{_e(printable_name(name))} "
                            f"<span class=\"steps\">({_e(', '.join(steps))})</span></li>" for name, steps in students.items())
            parts.append(f"<section class=\"code {kind}\"><h3><code>{_e(code)}</code>: {len(students)} "
                         f"student{'s' if len(students) != 1 else ''} ({share:.0f}%)</h3>"
                         f"<p>Students read: &ldquo;{_e(what)}&rdquo;{reread}</p><ul>{items}</ul></section>")
    else:
        parts.append("<p>No submission showed a misconception or a fault.</p>")

    unreadable = [result for result in results if result.error]
    if unreadable:
        parts.append("<h2>Not graded</h2><p>These files could not be read; every step scored 0.</p><ul>"
                     + "".join(f"<li>{_e(printable_name(result.submission))}: {_e(printable(result.error))}</li>"
                               for result in unreadable)
                     + "</ul>")

    parts.append("<h2>Students</h2><table><thead><tr><th>submission</th><th class=\"n\">score</th><th>diagnoses</th>"
                 "</tr></thead><tbody>")
    for result in results:
        codes = sorted({code for step in result.steps for code in step.diagnoses}) if not result.error else []
        parts.append(f"<tr><td>{_e(printable_name(result.submission))}</td><td class=\"n\">{result.score:g}</td>"
                     f"<td>{_e(', '.join(codes)) if codes else ('not graded' if result.error else '')}</td></tr>")
    parts.append("</tbody></table>")
    parts.append("<p class=\"foot\">Per-step scores for an LMS or a spreadsheet: <code>scores.csv</code>, "
                 "next to this page.</p></body></html>\n")
    return "\n".join(parts)


_HEAD = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; img-src data:; style-src 'unsafe-inline'">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Chapter 15 class report</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; max-width: 60rem; margin: 2rem auto;
       padding: 0 1rem; color: #222; line-height: 1.45; }
h1 { font-size: 1.5rem; margin-bottom: .3rem; }
h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ddd; padding-bottom: .2rem; }
h3 { font-size: 1rem; margin: 0 0 .3rem; }
.lead { color: #444; }
img { max-width: 100%; height: auto; display: block; margin: .5rem 0; }
table { border-collapse: collapse; width: 100%; font-size: .9rem; margin: .5rem 0; }
th, td { text-align: left; padding: .25rem .5rem; border-bottom: 1px solid #eee; vertical-align: top; }
th { border-bottom: 1px solid #bbb; }
th.n, td.n { text-align: right; font-variant-numeric: tabular-nums; }
section.code { border-left: 4px solid #0072B2; padding: .3rem .8rem; margin: .8rem 0; background: #f7fafc; }
section.code.fault { border-left-color: #999; background: #f8f8f8; }
section.code p { margin: .2rem 0; }
section.code ul { margin: .2rem 0; padding-left: 1.2rem; }
.steps { color: #666; font-size: .85rem; }
.foot { color: #666; font-size: .85rem; margin-top: 2rem; }
</style></head><body>"""
