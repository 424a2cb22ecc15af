"""One grading key for the whole run: every process the tests start (qkv-grade, nbgrader's kernel,
a run as another user) draws the same hidden cases from a seed as the tests' own `Grader`.
The tests of the key itself (test_keys.py) set their own."""
import os
import secrets

os.environ.setdefault("QKV_CASE_KEY", secrets.token_hex(32))
