"""The hidden graders as pytest tests, for instructors who want pytest's own report of one submission.

    qkv-graders alice.py [--seed N] [pytest options]

Each step has two tests: the chapter's worked example, whose expected values are tied to
data/part-iv/attention.json, and the seeded hidden cases, compared with the reference solution.
The submission runs in the same isolated runner as `qkv-grade`; pytest only reports.
"""
