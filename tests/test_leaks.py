"""What a submission says or is called never carries a hidden case out, nor acts where it is shown."""
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
    assert "It raised ValueError in `softmax_rows`; its message and line are shown only for the chapter's " \
           "example." in steps["softmax"]["feedback"], steps["softmax"]["feedback"]


# The scores softmax_rows is handed, kept, then returned by head_facts on its hidden calls as the
# bits of float64 numbers in the ints of its shapes and its axis: a channel as wide as the ints shown.
SHAPES_SPELL_INPUTS = variant([("def softmax_rows(s):\n", "def softmax_rows(s):\n"
                                "    SEEN.extend(np.asarray(s, dtype=float).ravel().tolist())\n"),
                               ("def head_facts(t, d_k, d_v):\n", "SEEN = []\n\n\ndef head_facts(t, d_k, d_v):\n"
                                "    if SEEN and (t, d_k, d_v) != (5, 4, 3):  # the chapter's example: answered right\n"
                                "        import struct\n"
                                "        seen = [x for x in SEEN if abs(x) > 0.01][-9:]\n"
                                "        bits = [struct.unpack('<q', struct.pack('<d', x))[0] for x in seen]\n"
                                "        return {'divisor': float(d_k) ** 0.5, 'score_shape': tuple(bits[:4]),\n"
                                "                'output_shape': tuple(bits[4:8]) + tuple(range(40)), 'softmax_axis': bits[8]}\n")])


def test_a_returned_shape_or_axis_on_a_hidden_case_shows_six_digits_at_most(tmp_path):
    """Exercise 4's shapes and axis, as every number of a hidden case: what the student returned
    is quoted to six significant digits, four numbers of a shape at most."""
    require_sandbox()
    path = tmp_path / "attention_head.py"
    path.write_text(SHAPES_SPELL_INPUTS)
    result = grade_json(path, "--seed", str(SEED))
    feedback = steps_by_id(result)["ex4_shapes"]["feedback"]
    assert "on hidden case" in feedback and "score_shape is (" in feedback and "softmax_axis is " in feedback, \
        feedback
    assert max(len(run) for run in re.findall(r"\d+", feedback)) <= 6, feedback
    assert "…" in feedback.split("output_shape is (", 1)[1].split(")", 1)[0], feedback


# A class named after the input, raised from a function named after it, in a file named after it:
# on every input but the example.
NAMES_ITS_INPUT = variant([("def scores(q, k):\n", "def scores(q, k):\n"
                            "    if q.shape != (3, 2):\n"
                            "        spelled = 'Q' + '_'.join(str(int(abs(x) * 1e6)) for x in q.ravel()[:6])\n"
                            "        def throw():\n"
                            "            raise type(spelled, (Exception,), {})()\n"
                            "        code = throw.__code__.replace(co_name=spelled, co_filename='attention_head.py' + spelled)\n"
                            "        throw = type(throw)(code, globals(), None, None, throw.__closure__)\n"
                            "        throw()\n")])


def test_a_hidden_case_names_no_class_function_or_file_the_submission_named(tmp_path):
    require_sandbox()
    path = tmp_path / "attention_head.py"
    path.write_text(NAMES_ITS_INPUT)
    shown = json.dumps(grade_json(path, "--seed", str(SEED))) + qkv_grade(str(path), "--seed", str(SEED)).stdout
    digits = {str(int(abs(float(x)) * 1e6)) for case in cases.build(SEED)["scores"] if not case.public
              for call in case.calls for x in call.args[0].ravel() if abs(float(x)) > 0.01}
    assert not set(re.findall(r"\d{5,}", shown)) & digits
    assert "It raised an exception of a class of its own" in shown


def _cells_split_on(line: str, separator: str) -> list[str]:
    """The cells a spreadsheet splitting at `separator` sees, honouring double quotes."""
    cells, cell, quoted = [], "", False
    for char in line:
        if char == '"':
            quoted = not quoted
        elif char == separator and not quoted:
            cells.append(cell)
            cell = ""
            continue
        cell += char
    return cells + [cell]


def test_a_file_name_is_one_cell_in_every_spreadsheet_whatever_it_holds(tmp_path):
    """A name holding a carriage return, a comma or a semicolon followed by a formula stays one
    cell whether the spreadsheet splits at commas or (where the comma is the decimal mark) at
    semicolons, and no cell starts a formula."""
    import csv
    import io

    from autograder import results
    from autograder.report import scores_csv

    names = ["return\r.py", "a,=1+1.py", "x;=HYPERLINK(\"http://e\");=2+3;.py", 'q"uote.py', "tab\t=1.py",
             "  =1+1.py", " @SUM(1).py"]
    graded = [results.unreadable(name, "test", 1, "none") for name in names]
    for text in (results.to_csv(graded, [("s;=cmd|x.py", "skipped; =1+1")]), scores_csv(graded)):
        rows = list(csv.reader(io.StringIO(text, newline="")))
        assert [row[0] for row in rows[1:1 + len(names)]] == [results.spreadsheet_cell(name) for name in names]
        assert len({len(row) for row in rows}) == 1
        lines = text.split("\n")  # a reader that splits lines at \n, honouring no quotes across them
        for line in lines[1:]:
            for separator in ",;":
                cells = [cell.strip('"') for cell in _cells_split_on(line, separator)]
                assert not [cell for cell in cells if cell.lstrip(" ").startswith(("=", "+", "@"))], (separator, line)


# A value whose type is named after the input, and an array whose dtype's field is: on every input
# but the example.
TYPED_AFTER_ITS_INPUT = variant([("def scores(q, k):\n", "def scores(q, k):\n"
                                  "    if q.shape != (3, 2):\n"
                                  "        return type('Q' + repr(q.ravel()[:4].tolist()), (), {})()\n"),
                                 ("def mix(a, v):\n", "def mix(a, v):\n"
                                  "    if v.shape != (3, 2):\n"
                                  "        return np.zeros(1, dtype=[('V' + repr(v.ravel()[:3].tolist()), 'f8')])\n")])


def test_a_hidden_case_never_names_a_type_or_dtype_the_submission_made(tmp_path):
    require_sandbox()
    path = tmp_path / "attention_head.py"
    path.write_text(TYPED_AFTER_ITS_INPUT)
    result = grade_json(path, "--seed", str(SEED))
    shown = json.dumps(result) + qkv_grade(str(path), "--seed", str(SEED), "--format", "gradescope").stdout
    assert not set(re.findall(r"-?\d+\.\d{6,}", shown)) & (_hidden_numbers("scores") | _hidden_numbers("mix"))
    steps = steps_by_id(result)
    assert "wrong-type" in steps["scores"]["diagnoses"] and "wrong-type" in steps["mix"]["diagnoses"]
    assert "what it was is shown only for the chapter's example" in steps["scores"]["feedback"] + steps["mix"]["feedback"]


def test_a_hidden_exception_names_the_case_whose_message_is_shown(tmp_path):
    """The batch step's public case is the chapter's example with a second sequence stacked after
    it: that, not the chapter's example alone, is where the message would be shown."""
    require_sandbox()
    path = tmp_path / "attention_head.py"
    path.write_text(variant([("def self_attention_head(x, w_q, w_k, w_v):\n",
                              "def self_attention_head(x, w_q, w_k, w_v):\n"
                              "    if np.ndim(x) == 3 and np.shape(x)[:2] != (2, 3):\n"
                              "        raise ValueError('batches of two only')\n")]))
    steps = steps_by_id(grade_json(path, "--seed", str(SEED)))
    assert steps["batch"]["status"] == "partial", steps["batch"]["feedback"]
    assert "It raised ValueError in `self_attention_head`; its message and line are shown only for the " \
           "chapter's example with a second sequence stacked after it." in steps["batch"]["feedback"], \
        steps["batch"]["feedback"]


# Every input a step is called with, kept across steps; every later step's first call (the
# chapter's example, whose message is shown) raises with the last ones it kept.
REMEMBERS_ITS_INPUTS = """import numpy as np

_seen = []
_raised = set()


def _keep(name, *arrays):
    _seen.append([np.asarray(a).ravel().tolist() for a in arrays])
    if name not in _raised:
        _raised.add(name)
        raise ValueError("SEEN " + repr(_seen[-2:]))


def project_qkv(x, w_q, w_k, w_v):
    _seen.append(np.asarray(x).ravel().tolist())
    return x @ w_q, x @ w_k, x @ w_v


def scores(q, k):
    _keep("scores", q, k)
    return q @ np.swapaxes(k, -1, -2)


def scale(d, d_k):
    _keep("scale", d)
    return d / np.sqrt(d_k)


def softmax_rows(s):
    _keep("softmax_rows", s)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def mix(a, v):
    _keep("mix", a, v)
    return a @ v
"""


def test_no_public_message_carries_what_an_earlier_step_saw_of_a_hidden_case(tmp_path):
    """The submission's process lives on from step to step, so every step's public calls run before
    any hidden one: a message shown on the chapter's example cannot hold a hidden input seen before."""
    require_sandbox()
    path = tmp_path / "attention_head.py"
    path.write_text(REMEMBERS_ITS_INPUTS)
    result = grade_json(path, "--seed", str(SEED))
    shown = json.dumps(result) + qkv_grade(str(path), "--seed", str(SEED), "--format", "gradescope").stdout
    steps = steps_by_id(result)
    assert "SEEN" in steps["scale"]["feedback"], steps["scale"]["feedback"]  # the message is shown
    hidden = set()
    for step_id in ("qkv", "scores", "scale", "softmax", "mix"):
        hidden |= _hidden_numbers(step_id)
    found = set(re.findall(r"\d[\d.e-]*", shown)) & hidden
    assert not found, sorted(found)[:5]


def test_a_terminals_controls_a_submission_prints_or_raises_stay_escaped_in_json_and_gradescope(tmp_path):
    """`jq -r` prints a JSON string as it stands: what a student's code printed or raised, quoted in
    the output and the feedback, reaches no terminal as a control (a title, a cleared screen, a
    line reordered), in qkv-grade's JSON as on its console, and in Gradescope's results."""
    source = variant([("def scale(d, d_k):\n", "def scale(d, d_k):\n"
                       "    raise ValueError('\\x1b]2;OWNED\\x07\\x1b[2J all steps passed \\u202e')\n")])
    path = tmp_path / "attention_head.py"
    path.write_text("print('\\x1b[31mFAKE\\x1b[0m \\u202edesrever')\n" + source)
    for fmt in ("json", "gradescope"):
        done = qkv_grade(str(path), "--format", fmt, "--seed", "3")
        document = json.loads(done.stdout)
        text = json.dumps(document, ensure_ascii=False)
        assert "OWNED" in text and "\x1b" not in text and "\u202e" not in text and "\x07" not in text, fmt
