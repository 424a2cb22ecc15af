"""The self-check never names a mistake the hidden graders would not name on the same code.

Every submission of the test corpus (tests/submissions: the variants, the realistic and unusual
mistakes, the unlisted, held-out and fresh ones, and the grammar's single slips with a sample of
its pairs) is checked as a student checks it, with the released public_checks.py called on the
submission's module, and graded by the hidden graders in one real `qkv-grade --format json` run. Wherever the self-check
names one mistake on a step, that code must be among the codes the hidden grading gives the step
(counting the possibilities of a "one of: ..." line); where it says the numbers fit each of two or
three mistakes on the public examples (edits that give the same values there), each of them must be.
"""
from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
import types
from pathlib import Path

import pytest

from inprocess import runs_here
from submissions import grammar
from submissions.fresh import FRESH
from submissions.heldout import HELDOUT
from submissions.unlisted import UNLISTED
from submissions.variants import everything
from support import REPO, qkv_grade

SEED = 7
PAIRS = 60  # of the grammar's compositions of two slips, a fixed sample
NAMED = re.compile(r"^\[([a-z][a-z0-9_-]*)\] ", re.M)
ONE_OF = re.compile(r"one of: (.*)\.$", re.M)


def _public_checks():
    """The released self-check module, as students have it."""
    path = REPO / "assignments" / "attention_head" / "public_checks.py"
    spec = importlib.util.spec_from_file_location("released_public_checks_truth", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _corpus() -> dict[str, str]:
    """Every submission that can run in this process (none that is there to hang or kill it)."""
    found = {name: s.text() for name, s in everything().items() if runs_here(s.text(), s.status)}
    found.update({f"unlisted-{name}": s.text() for name, s in UNLISTED.items() if runs_here(s.text())})
    found.update({f"heldout-{name}": s.text() for name, s in HELDOUT.items() if runs_here(s.text())})
    found.update({f"fresh-{name}": s.text() for name, s in FRESH.items() if runs_here(s.text())})
    choices = grammar.singles() + grammar.sample(grammar.pairs(), PAIRS, seed=SEED)
    found.update({f"grammar-{grammar.name(choice)}": grammar.source(choice) for choice in choices})
    return found


def _self_check(checks, text: str) -> dict[str, tuple[list[str], str]]:
    """The codes the self-check names on each step whose check fails (none: an empty list), with
    its message, on one submission's module."""
    module = types.ModuleType("attention_head")
    module.__file__ = "attention_head.py"
    namespace = module.__dict__
    # registered while it runs, as an import registers it: a dataclass looks its module up there
    saved = sys.modules.get("attention_head")
    sys.modules["attention_head"] = module
    try:
        exec(compile(text, "attention_head.py", "exec"), namespace)
    except Exception:
        return {}
    finally:
        if saved is None:
            sys.modules.pop("attention_head", None)
        else:
            sys.modules["attention_head"] = saved
    named = {}
    for step_id in checks.step_ids():
        outcome = checks.run_step(step_id, namespace)
        if outcome.status == "failed":
            named[step_id] = (NAMED.findall(outcome.message), outcome.message)
    return named


def _graded(folder: Path, corpus: dict[str, str]) -> dict[str, dict[str, set[str]]]:
    """The hidden graders' codes for each submission's steps, with every "one of" possibility."""
    (folder / "in").mkdir()
    for name, text in corpus.items():
        (folder / "in" / f"{name}.py").write_text(text, encoding="utf-8")
    done = qkv_grade(str(folder / "in"), "--format", "json", "--seed", str(SEED), "--timeout", "2",
                     "--out", str(folder / "out"), timeout=3600)
    assert done.returncode == 0, done.stderr
    graded = {}
    for result in json.loads(done.stdout):
        steps = {}
        for step in result["steps"]:
            codes = set(step["diagnoses"])
            for options in ONE_OF.findall(step["feedback"]):
                codes |= {code for option in options.split("; ") for code in option.split(" with ")}
            steps[step["id"]] = codes
        graded[result["submission"].removesuffix(".py")] = steps
    return graded


def test_the_self_check_names_only_what_the_hidden_graders_name(tmp_path, capsys):
    corpus = _corpus()
    checks = _public_checks()
    graded = _graded(tmp_path, corpus)
    shutil.rmtree(tmp_path / "in", ignore_errors=True)
    failing, named_steps, wrong = 0, 0, []
    for name, text in sorted(corpus.items()):
        for step_id, (codes, message) in _self_check(checks, text).items():
            failing += 1
            if not codes:
                continue
            named_steps += 1
            given = graded[name][step_id]
            codes = list(dict.fromkeys(codes))  # a step of two functions names each one's mistake
            # possibilities, each fitting the public examples, are each among the hidden graders' too
            if not all(code in given for code in codes):
                wrong.append(f"{name} {step_id}: self-check names {codes}, the hidden graders {sorted(given)}")
    with capsys.disabled():
        print(f"\nself-check: {len(corpus)} submissions, {failing} failing steps, a mistake named on "
              f"{named_steps} of them, {len(wrong)} untrue")
    assert named_steps > 100
    assert wrong == [], "\n".join(wrong)


def test_the_self_check_leaves_numpy_s_error_handling_as_the_student_set_it():
    """A student who asked numpy to raise on overflow (`np.seterr(all="raise")` at import) sees the
    hidden graders' FloatingPointError on the further public examples too; anyone else sees the
    infinity, and no warning from an example never shown."""
    import warnings

    import numpy as np

    checks = _public_checks()
    call = {"function": "softmax_rows", "args": [{"array": [[1.0, 2.0]]}]}
    namespace = {"softmax_rows": lambda s: np.exp(np.asarray(s) * 1000.0)}
    old = np.seterr(all="raise")
    try:
        seen = checks._seen(namespace, call)
    finally:
        np.seterr(**old)
    assert (seen.kind, seen.value.split(":")[0]) == ("raised", "FloatingPointError")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        seen = checks._seen(namespace, call)
    assert seen.kind == "value" and np.isinf(seen.value).all()
