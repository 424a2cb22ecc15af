"""Grading for Chapter 15: the step table, hidden cases, the isolated runner, the judge and its views."""
