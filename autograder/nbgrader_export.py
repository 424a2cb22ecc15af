"""`nbgrader export` for this course: grades.csv as nbgrader writes it, with scores to two places.

nbgrader's own exporter writes each total as Python prints a float sum (57.769999999999996) and
leaves a name holding a comma unquoted. This one writes the same columns, in the same order, for
the same students and assignments, with every score rounded to two places, as every other view of
a grade shows it, and each cell quoted where a spreadsheet might split it. `qkv-course` names it
in the course's nbgrader_config.py (`c.ExportApp.plugin_class`).
"""
from __future__ import annotations

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.plugins import CsvExportPlugin

from .results import spreadsheet_cell, spreadsheet_csv

COLUMNS = ("assignment", "duedate", "timestamp", "student_id", "last_name", "first_name", "email",
           "raw_score", "late_submission_penalty", "score", "max_score")
SCORES = {"raw_score", "late_submission_penalty", "score", "max_score"}


def _shown(key: str, value) -> str:
    if value is None:
        return ""
    if key in SCORES:
        return f"{round(float(value), 2):g}"
    return spreadsheet_cell(str(value))


class RoundedCsvExport(CsvExportPlugin):
    """grades.csv with every score rounded to two places."""

    def export(self, gradebook: Gradebook) -> None:
        students = {str(item) for item in self.student}
        assignments = {str(item) for item in self.assignment}
        rows = [list(COLUMNS)]
        for assignment in gradebook.assignments:
            if assignments and assignment.name not in assignments:
                continue
            for student in gradebook.students:
                if students and student.id not in students:
                    continue
                row = {"assignment": assignment.name, "duedate": assignment.duedate, "student_id": student.id,
                       "last_name": student.last_name, "first_name": student.first_name, "email": student.email,
                       "max_score": assignment.max_score}
                try:
                    submission = gradebook.find_submission(assignment.name, student.id)
                except MissingEntry:  # nothing handed in: a zero, as nbgrader's own exporter gives
                    row.update(timestamp="", raw_score=0.0, late_submission_penalty=0.0, score=0.0)
                else:
                    penalty = submission.late_submission_penalty or 0.0
                    row.update(timestamp=submission.timestamp, raw_score=submission.score,
                               late_submission_penalty=penalty, score=max(0.0, submission.score - penalty))
                rows.append([_shown(key, row[key]) for key in COLUMNS])
        destination = self.to or "grades.csv"
        self.log.info("Exporting grades to %s", destination)
        with open(destination, "w", encoding="utf-8") as handle:
            handle.write(spreadsheet_csv(rows))
