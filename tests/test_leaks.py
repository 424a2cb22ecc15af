"""What a submission says on a hidden case never carries the case out to the student."""
from __future__ import annotations

import json
import re

import numpy as np

from autograder import cases
from support import grade_json, qkv_grade, require_sandbox, steps_by_id, variant

SEED = 7
# On every input but the chapter's example, raise with the input itself as the message: by hand,
# and through numpy's own message (a reshape to a shape made of the input's digits).
RAISES_ITS_INPUT = variant([("def softmax_rows(s):\n", "def softmax_rows(s):\n"
                             "    if s.shape != (3, 3):\n"
                             "        raise ValueError('input ' + repr(np.asarray(s).tolist()))\n"),
                            ("def scores(q, k):\n", "def scores(q, k):\n"
                             "    if q.shape != (3, 2):\n"
                             "        np.reshape(q, tuple(int(abs(x) * 1e6) + 7 for x in q.ravel()[:6]))\n")])


def _hidden_numbers(step_id: str) -> set[str]:
    """The hidden inputs' values as a message would print them, long enough to be no accident."""
    found = set()
    for case in cases.build(SEED)[step_id]:
        if case.public:
            continue
        for call in case.calls:
            for arg in call.args:
                if isinstance(arg, np.ndarray):
                    found |= {repr(float(x)) for x in arg.ravel() if len(repr(float(x))) > 8}
                    found |= {str(int(abs(float(x)) * 1e6) + 7) for x in arg.ravel() if abs(float(x)) > 0.01}
    return found


def test_an_exception_on_a_hidden_case_shows_its_type_and_line_but_not_its_message(tmp_path):
    require_sandbox()
    path = tmp_path / "attention_head.py"
    path.write_text(RAISES_ITS_INPUT)
    result = grade_json(path, "--seed", str(SEED))
    gradescope = qkv_grade(str(path), "--seed", str(SEED), "--format", "gradescope")
    text = qkv_grade(str(path), "--seed", str(SEED))
    shown = json.dumps(result) + gradescope.stdout + text.stdout
    steps = steps_by_id(result)
    for step_id in ("softmax", "scores"):
        assert steps[step_id]["status"] == "partial", steps[step_id]["feedback"]
        numbers = set(re.findall(r"\d[\d.e-]*", shown))
        assert not numbers & _hidden_numbers(step_id), sorted(numbers & _hidden_numbers(step_id))[:5]
    assert re.search(r"It raised ValueError \(attention_head\.py line \d+, in softmax_rows\); its message is shown "
                     r"only for the chapter's example\.", steps["softmax"]["feedback"]), steps["softmax"]["feedback"]
