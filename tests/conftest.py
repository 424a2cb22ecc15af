"""One grading key for the whole suite: every process the tests start (qkv-grade, nbgrader's kernel,
a run as another user) draws the same hidden cases from a seed as the tests' own `Grader`, and the
same from one run of the suite to the next, as a fixed seed did before keys. The tests of the key
itself (test_keys.py) set their own."""
import os

os.environ.setdefault("QKV_CASE_KEY", "5eed" * 16)
