"""Checks, claim by claim, that every sentence of a submission's feedback is true of it.

A submission graded in the test's own process (tests/inprocess.py) keeps the student's own values,
so every step's feedback can be read back as a list of claims and each checked here, independently
of the judge's own reasoning:

- a named mistake has a model (a composition of slips, an earlier step's mistake carried through
  the reference, or a derived edit) that reproduces the student's value, or the student's very
  exception, on every failing call of the function it names (where every failing call returned
  the wrong type, the very object the student returned), and where every failing call raised, it
  is an earlier step's mistake carried forward or a single slip of the chapter's list; a condition of exercise 2's
  counterexample said to fail does fail for the matrix returned; `batch-axes-mixed` is said only
  where the head returns values for one sequence;
- a value quoted as what the function returned ("got …") is the returned value at that index, and
  one said to be "off by" a difference is that far from the reference's value there;
- the advice to run the function on the chapter's example is given only where the example fails,
  and "the very numbers of the chapter's example" only where a hidden case returned them;
- NaN or infinity is reported only beside a call whose value holds one, and `non-finite` only on
  cases that do;
- a carried step names only its earlier steps' mistakes; what a code says of the returned weights
  or output (rows off one, an output of zeros, the reference's numbers transposed) holds of them;
- the value rows exercise 3's shift is said to have reached give the student's value there;
- how the wrong numbers relate to the expected ones (a constant added, per row or column, or a
  factor), and how the wrong shapes relate to the expected ones (axes of length 1 added or taken
  away, one axis more or fewer), holds of every wrong array; "it ran on the chapter's example" and
  "raised on hidden cases" hold of the calls.
"""
from __future__ import annotations

import copy
import re

import numpy as np
from solutions import attention_head as reference

from autograder import atlas, derived, diagnoses, judge, slips
from autograder.steps import BY_ID, STEPS
from inprocess import Graded

# Codes read from the look of the values or from the runner, not from a model.
PROBES = judge.READ_FROM_LOOK


def _calls(graded, step_id):
    return [call for case in graded.cases[step_id] for call in case.calls]


def _labelled(graded, step_id):
    return [(case, call) for case in graded.cases[step_id] for call in case.calls]


def _value(fn, outcome):
    if outcome.raised is not None:
        return ("raised", (outcome.raised["type"], outcome.raised["message"]))
    try:
        return ("value", judge.canonical(fn, outcome.value))
    except judge.WrongType:
        return ("other", outcome.value)


def _same_object(got, model) -> bool:
    """A value of the wrong type and a model's, part for part."""
    if isinstance(model, np.ndarray):
        return (isinstance(got, np.ndarray) and got.shape == model.shape and got.dtype.kind == model.dtype.kind
                and np.allclose(got.astype(float), model.astype(float), rtol=judge.MODEL_RTOL,
                                atol=judge.MODEL_ATOL, equal_nan=True))
    if isinstance(model, (tuple, list)):
        return isinstance(got, (tuple, list)) and len(got) == len(model) and all(map(_same_object, got, model))
    if isinstance(model, dict):
        return isinstance(got, dict) and set(got) == set(model) and all(_same_object(got[k], model[k]) for k in model)
    return type(got) is type(model) and got == model


def _sums_to_one(values) -> np.ndarray:
    return np.abs(np.asarray(values) - 1.0) <= 1e-9


# Exercise 2's counterexample: each condition a code says it fails, checked on the matrix itself.
FAILS = {
    "counterexample-not-3x3": lambda m: m.shape != (3, 3),
    "counterexample-negative-entries": lambda m: m.shape == (3, 3) and not (m >= 0).all(),
    "counterexample-columns-not-normalized": lambda m: m.shape == (3, 3) and not _sums_to_one(m.sum(axis=0)).all(),
    "counterexample-row-normalized": lambda m: m.shape == (3, 3) and _sums_to_one(m.sum(axis=1)).all(),
    "counterexample-first-row-sums-to-one": lambda m: m.shape == (3, 3) and bool(_sums_to_one(m[0].sum())),
}


def _reference(fn, call):
    from solutions import attention_head as reference

    return judge.canonical(fn, getattr(reference, fn)(*call.args))


def _same(student: dict, model: dict) -> bool:
    for name, part in model.items():
        got = student.get(name)
        if isinstance(part, np.ndarray):
            if not isinstance(got, np.ndarray) or got.shape != part.shape:
                return False
            if not np.allclose(got, part, rtol=judge.MODEL_RTOL, atol=judge.MODEL_ATOL, equal_nan=True):
                return False
        elif name == "softmax_axis":
            if {1: -1, -2: 0}.get(got, got) != {1: -1, -2: 0}.get(part, part):
                return False
        elif name == "divisor":
            if not np.isclose(got, part, rtol=judge.MODEL_RTOL, atol=judge.MODEL_ATOL):
                return False
        elif (tuple(got) if isinstance(got, (list, tuple)) else got) != (
                tuple(part) if isinstance(part, (list, tuple)) else part):
            return False
    return True


def _model_gives(model, fn, call):
    try:
        with np.errstate(all="ignore"):
            raw = model(*call.args)
    except diagnoses.Inapplicable:
        return ("value", _reference(fn, call))
    except Exception as exc:
        message = str(exc)
        return ("raised", (type(exc).__name__, message if len(message) <= 300 else message[:300] + "…"))
    if judge.RETURNS[fn][0] == "facts":
        return ("value", {**_reference(fn, call), **raw}) if isinstance(raw, dict) else ("other", None)
    try:
        return ("value", judge.canonical(fn, raw))
    except judge.WrongType:
        return ("other", raw)


def _models(fn: str, named: set):
    """Every model whose codes are all named: the grammar's, the derived edits, and earlier
    functions' models called through the reference's own calls."""
    for depth in (1, 2):
        for codes, _, model in slips.models(fn, depth):
            if set(codes) <= named:
                yield codes, model
    for code in sorted(named):  # single edits and pairs of edits alike
        if derived.is_derived(code) and derived.fn_of(code) == fn:
            yield (code,), derived.model(code)
    for used in slips.PIPELINES:
        if used == fn:
            continue
        for depth in (1, 2):
            for codes, _, model in slips.models(used, depth):
                if set(codes) <= named:
                    yield codes, diagnoses.through_reference(fn, used, model)
        for code in sorted(named):
            if derived.is_derived(code) and derived.fn_of(code) == used:
                yield (code,), diagnoses.through_reference(fn, used, derived.model(code))


def _failing(graded, step_id):
    """(call, what the student gave) for every call that does not match the reference; where every
    failing call returned the wrong type, those."""
    found, typed = [], []
    for call, outcome in zip(_calls(graded, step_id), graded.outcomes[step_id]):
        kind, value = _value(call.fn, outcome)
        if kind == "other":
            typed.append((call, kind, value))
        if call.fn == "column_normalized_counterexample":
            if kind == "value" and judge._counterexample_problems(value["counterexample"]):
                found.append((call, kind, value))
            continue
        if kind == "raised" and value[0] not in judge.NOT_IMPLEMENTED and not _wrote_into_argument(value):
            found.append((call, kind, value))
        elif kind == "value":
            if judge.differences(value, _reference(call.fn, call), False, describe=False):
                found.append((call, kind, value))
    return found or typed


def _wrote_into_argument(raised) -> bool:
    """The error an in-place write into a (read-only) argument raises: `mutates-input` says so."""
    return raised[0] == "ValueError" and "read-only" in raised[1]


def _check_named_mistakes(graded, step_id, result):
    named = set(result.diagnoses) - PROBES
    if not named or result.carried_from:
        return
    failing = _failing(graded, step_id)
    explained_codes = set()
    for fn in dict.fromkeys(call.fn for call, _, _ in failing):
        mine = [(call, kind, value) for call, kind, value in failing if call.fn == fn]
        if fn == "column_normalized_counterexample":
            explained_codes |= {code for code in named & set(FAILS)
                                if all(kind == "value" and FAILS[code](value["counterexample"]) for _, kind, value in mine)}
        reproducing = [codes for codes, model in _models(fn, named)
                       if all(_agrees(_model_gives(model, fn, call), kind, value) for call, kind, value in mine)]
        explained_codes |= {code for codes in reproducing for code in codes}
    unproven = named - explained_codes
    assert not unproven, f"{step_id}: {sorted(unproven)} named, but no model of it reproduces every failing call"
    if failing and all(kind == "raised" for _, kind, _ in failing) \
            and not all(atlas.raised_for_nonfinite(*value) for _, _, value in failing):
        # An exception alone names no line: many edits that are right wherever they run raise it.
        # Only an earlier step's mistake, carried forward, or a single slip of the chapter's list
        # may explain a crash. (Python's arithmetic raising where numpy's gives infinity or NaN, a
        # division by zero in a loop, is a value: only models not finite there reproduce it.)
        earlier = {code for used in BY_ID[step_id].uses for code in _all_diagnoses(graded, used)}
        guessed = {code for code in named - earlier if derived.is_derived(code)}
        assert not guessed, f"{step_id}: {sorted(guessed)} named for code that only raised"


def _all_diagnoses(graded, step_id):
    """The codes of a step and of every step it builds on."""
    step = BY_ID[step_id]
    return set(graded.steps[step_id].diagnoses).union(*(_all_diagnoses(graded, used) for used in step.uses))


def _agrees(model_gave, kind, value) -> bool:
    model_kind, model_value = model_gave
    if kind == "raised":
        return (model_kind == "raised" and model_value == value) or (
            model_kind == "value" and atlas.raised_for_nonfinite(*value)
            and any(isinstance(part, np.ndarray) and part.dtype.kind == "f" and not np.isfinite(part).all()
                    for part in model_value.values()))
    if kind == "other":
        if _same_object(value, model_value):
            return model_kind == "other"
        # or the same structure holding the same numbers (the output alone, not the tuple)
        mine, theirs = judge.loose_value(value), judge.loose_value(model_value)
        return (model_kind == "other" and mine is not None and theirs is not None
                and theirs.keys() == mine.keys() and _same(mine, theirs))
    return model_kind == "value" and _same(value, model_value)


def _shown_call(graded, step_id, text, lead="Called"):
    found = re.search(rf"^{re.escape(lead)} (.+) on (.+)\.$", text, flags=re.M)
    if not found:
        return None
    shown, label = found.groups()
    for (case, call), outcome in zip(_labelled(graded, step_id), graded.outcomes[step_id]):
        if case.label == label and call.shown(judge.inspect_names(call.fn)) == shown:
            return case, call, outcome
    raise AssertionError(f"{step_id}: the call shown ({shown} on {label}) is not one of the step's calls")


def _nonfinite(fn, outcome) -> bool:
    kind, value = _value(fn, outcome)
    return kind == "value" and any(isinstance(part, np.ndarray) and not np.isfinite(part).all()
                                   for part in value.values())


def _check_quoted_values(graded, step_id, text):
    # a call that raised may be shown with one that returned a wrong answer after it: the values
    # quoted below each are that call's
    first, _, second = text.partition("\n" + judge.NOT_ONLY_RAISED + " ")
    if second:
        shown = _shown_call(graded, step_id, judge.NOT_ONLY_RAISED + " " + second, judge.NOT_ONLY_RAISED)
        assert shown is not None and not shown[2].raised, f"{step_id}: a call said to have returned, which raised"
        _check_values_of(step_id, second, *shown)
    first, _, second = first.partition("\n" + judge.NOT_ONLY_NONFINITE + " ")
    if second:
        shown = _shown_call(graded, step_id, judge.NOT_ONLY_NONFINITE + " " + second, judge.NOT_ONLY_NONFINITE)
        assert shown is not None and not shown[2].raised and not _nonfinite(shown[1].fn, shown[2]), \
            f"{step_id}: a call said to have returned finite numbers, which did not"
        _check_values_of(step_id, second, *shown)
    shown = _shown_call(graded, step_id, first)
    if shown is not None:
        _check_values_of(step_id, first, *shown)


def _check_values_of(step_id, text, case, call, outcome):
    kind, value = _value(call.fn, outcome)
    name = None
    for line in text.splitlines():
        header = re.match(r"^(?:[\w ]+ )?(\w+): mismatched elements", line)  # "weights a": the array a
        if header:
            name = header.group(1)
            continue
        quoted = re.match(r"^  at \[([\d, ]+)\]: got (\S+?),? ?(?:expected|$)", line + " ")
        if quoted and name is not None:
            index = tuple(int(i) for i in quoted.group(1).split(","))
            got = float(value[name][index])
            said = float(quoted.group(2).rstrip(","))
            assert (np.isnan(said) and np.isnan(got)) or said == got or abs(said - got) <= 1e-5 * max(1.0, abs(got)), \
                f"{step_id}: quoted {said} at {index} of {name}, but the function returned {got}"
        off = re.match(r"^  at \[([\d, ]+)\]: off by (\S+)$", line)
        if off and name is not None:
            index = tuple(int(i) for i in off.group(1).split(","))
            want = judge.canonical(call.fn, getattr(reference, call.fn)(*copy.deepcopy(call.args)))[name]
            gap = abs(float(value[name][index]) - float(want[index]))
            said = float(off.group(2))
            assert abs(gap - said) <= 5e-3 * said, f"{step_id}: said off by {said} at {index} of {name}, not {gap}"
    if "your result contains NaN or infinity" in text:
        assert _nonfinite(call.fn, outcome), f"{step_id}: NaN or infinity reported beside finite values"


def _check_message_advice(graded, step_id, text):
    """Advice read from an exception's message is given only where a call raised, every call that
    raised (and was left unexplained) with that message: at least one raising call has it."""
    messages = [outcome.raised.get("message") or "" for outcome in graded.outcomes[step_id] if outcome.raised]
    for advice in dict.fromkeys(advice for _, advice in judge._MESSAGE_ADVICE if advice in text):
        needles = [(needle,) if isinstance(needle, str) else needle
                   for needle, given in judge._MESSAGE_ADVICE if given == advice]  # one advice, several messages
        assert any(all(part in message for part in parts) for parts in needles for message in messages), \
            f"{step_id}: advice for {needles} where no call raised with it"


def _check_crash_advice(graded, step_id, text):
    """"the shapes shown above" are those of a call that raised; a call named instead raised too."""
    if "Call the function with arguments like those shown above" in text:
        shown = _shown_call(graded, step_id, text)
        assert shown is not None and shown[2].raised, f"{step_id}: sent to the call shown, which does not raise"
    named = re.search(r"^  Where to look: Call (.+), with the shapes of (.+), and read the error\.$", text, flags=re.M)
    if named:
        call_text, label = named.groups()
        assert any(case.label == label and call.shown(judge.inspect_names(call.fn)) == call_text and outcome.raised
                   for (case, call), outcome in zip(_labelled(graded, step_id), graded.outcomes[step_id])), \
            f"{step_id}: sent to {call_text} on {label}, which does not raise"


def _check_example_advice(graded, step_id, text):
    example = [outcome for (case, _), outcome in zip(_labelled(graded, step_id), graded.outcomes[step_id])
               if case.public]
    if "Run the function on the chapter's example" in text:
        assert any(outcome.raised for outcome in example), f"{step_id}: sent to the example, which does not raise"
    if "the very numbers of the chapter's example" in text:
        assert "[hard-coded]" in text


def _check_nonfinite(graded, step_id, result):
    if "non-finite" not in result.diagnoses:
        return
    line = next(line for line in result.feedback.splitlines() if line.startswith("[non-finite]"))
    labels = re.search(r"\(on (.+)\)\.$", line)
    assert labels, f"{step_id}: non-finite without the cases showing it"
    shown = [label.strip() for label in re.split(r", (?=hidden case|the chapter|…)", labels.group(1))
             if label.strip() != "…"]
    by_label = {}
    for (case, call), outcome in zip(_labelled(graded, step_id), graded.outcomes[step_id]):
        by_label.setdefault(case.label, []).append(_nonfinite(call.fn, outcome))
    for label in shown:
        assert any(by_label[label]), f"{step_id}: non-finite said of {label}, whose values are finite"


def _check_low_precision(graded, step_id, result):
    """float32-sized errors: every wrong value lies within 1e-4 of the reference's."""
    if "low-precision" not in result.diagnoses:
        return
    for call, kind, value in _failing(graded, step_id):
        if kind == "value" and call.fn != "column_normalized_counterexample":
            want = _reference(call.fn, call)
            assert all(np.allclose(value[n], part, rtol=1e-4, atol=1e-6) for n, part in want.items()
                       if isinstance(part, np.ndarray)), f"{step_id}: low-precision said of errors beyond float32"


def _check_half_precision(graded, step_id, result):
    """float16-sized errors: every wrong value lies near the reference's, and one of them holds only
    numbers a float16 holds (or an earlier step it builds on is half precise)."""
    if "half-precision" not in result.diagnoses or result.carried_from:
        return
    halves = False
    for call, kind, value in _failing(graded, step_id):
        assert kind == "value", f"{step_id}: half-precision said where a call raised or returned another type"
        want = _reference(call.fn, call)
        for n, part in want.items():
            if isinstance(part, np.ndarray):
                got = np.asarray(value[n], dtype=float)
                assert np.allclose(got, part, rtol=4e-3, atol=2e-3 + 4e-3 * np.abs(part).max(initial=0)), \
                    f"{step_id}: half-precision said of errors beyond float16"
                halves = halves or bool(np.array_equal(got.astype(np.float16).astype(float), got))
    earlier = {used for used in BY_ID[step_id].uses if "half-precision" in graded.steps[used].diagnoses}
    assert halves or earlier, f"{step_id}: half-precision said of numbers no float16 holds"


def _check_slightly_off(graded, step_id, result):
    """Near every expected number: every wrong value lies within 1e-4 of the reference's, no call raised."""
    if "slightly-off" not in result.diagnoses or result.carried_from:
        return
    for call, kind, value in _failing(graded, step_id):
        assert kind == "value", f"{step_id}: slightly-off said where a call raised or returned another type"
        want = _reference(call.fn, call)
        assert all(np.allclose(value[n], part, rtol=1e-4, atol=1e-6) for n, part in want.items()
                   if isinstance(part, np.ndarray)), f"{step_id}: slightly-off said of numbers far from the reference's"


def _check_batch_allowed(graded, step_id, result):
    """`batch-axes-mixed` on a step of its own (not the batch step): right on every case without a
    batch axis, wrong only on cases with one."""
    if "batch-axes-mixed" not in result.diagnoses or result.carried_from or step_id == "batch":
        return
    failing = _failing(graded, step_id)
    assert failing and all(any(np.ndim(arg) > 2 for arg in call.args) for call, _, _ in failing), \
        f"{step_id}: batch-axes-mixed said where a call without a batch axis fails"


def _check_batch(graded, result):
    said = re.search(r"Your results hold every example of the batch but the (first|last), each of them right",
                     result.feedback)
    if said and not result.carried_from:
        for call, kind, value in _failing(graded, "batch"):
            want = _reference(call.fn, call)
            for name, part in want.items():
                kept = part[:-1] if said.group(1) == "last" else part[1:]
                assert kind == "value" and value[name].shape == kept.shape and np.allclose(value[name], kept), \
                    f"batch: said to leave out the {said.group(1)} example, but {name} is not the rest"
    if "batch-axes-mixed" in result.diagnoses:
        assert not any(outcome.raised for outcome in graded.outcomes["head"]), \
            "batch-axes-mixed said of a head that does not run on one sequence"
        assert any(kind != "other" for _, kind, _ in _failing(graded, "batch")), \
            "batch-axes-mixed said of a batch whose results are right in another form (wrong-type says so)"


def _check_carried(graded, result):
    """A step carried forward names only mistakes an earlier failing step named there."""
    if not result.carried_from:
        return
    earlier = {code for step in STEPS for code in graded.steps[step.id].diagnoses
               if step.id != result.id and graded.steps[step.id].status != "passed"}
    assert set(result.diagnoses) <= earlier, \
        f"{result.id}: carried, yet names {sorted(set(result.diagnoses) - earlier)}, which no earlier step named"


# Sentences that say what the returned weights are like, checked on the weights the student returned.
_WEIGHTS = ("a", "weights")
ROWS_OFF = {"not-normalized", "scaled-weights"}  # "... so the rows do not sum to one"


def _check_weight_claims(graded, step_id, result):
    said = ROWS_OFF & set(result.diagnoses)
    if not said or result.carried_from:
        return
    returned = [value[name] for call, kind, value in _failing(graded, step_id) if kind == "value"
                for name in _WEIGHTS if isinstance(value, dict) and isinstance(value.get(name), np.ndarray)]
    assert any(weights.ndim and not _sums_to_one(weights.sum(axis=-1)).all() for weights in returned), \
        f"{step_id}: {sorted(said)} says the rows do not sum to one, yet every row of the weights returned does"


def _transposed(part):
    return np.swapaxes(part, -1, -2) if part.ndim >= 2 else part


def _check_value_claims(graded, step_id, result):
    """`zero-output` says the output was zero; "right but transposed", or `transposed-result` as the
    only mistake named, that the numbers are the reference's transposed: each on some failing call,
    as the student returned it."""
    if result.carried_from:
        return
    returned = [(call, value) for call, kind, value in _failing(graded, step_id) if kind == "value"
                and isinstance(value, dict)]
    if "zero-output" in result.diagnoses:
        assert any(isinstance(value.get(name), np.ndarray) and not value[name].any()
                   for _, value in returned for name in ("output", "o")), f"{step_id}: zero-output of a nonzero output"
    if "right but transposed" in result.feedback or ("transposed-result" in result.diagnoses
                                                     and set(result.diagnoses) - PROBES == {"transposed-result"}):
        def right_but_transposed(call, value):
            want = _reference(call.fn, call)
            return all(not isinstance(part, np.ndarray) or (value[name].shape == _transposed(part).shape and np.allclose(
                value[name], _transposed(part), rtol=1e-6, atol=1e-9)) or (value[name].shape == part.shape and np.allclose(
                value[name], part, rtol=1e-6, atol=1e-9)) for name, part in want.items())
        assert any(right_but_transposed(call, value) for call, value in returned), \
            f"{step_id}: transposed-result says the numbers are right, yet no value is the reference's transposed"


_RELATION = re.compile(r"On every case it failed(?: with finite numbers)?, (every number of each wrong array is the expected one plus the same "
                       r"constant|each wrong array of yours is the expected one times (?:the same factor(?! \([^)]*\) plus a constant)|(1/)?(√)?(\w+) "
                       r"of that call)|each (row|column) "
                       r"of a wrong array is the expected \5 (plus a constant|times a factor) of its own)")


def _related_arrays(graded, step_id, text=""):
    """(call, got, expected) of every wrong array a failing call returned, of which a relation is said
    "on every case it failed": every such call returned a value. ("On every case it failed with finite
    numbers": of the failing calls whose every wrong array is finite, and there is one.)"""
    finite_only, seen = "On every case it failed with finite numbers," in text, 0
    for call, kind, value in _failing(graded, step_id):
        assert kind == "value", f"{step_id}: a relation said on every case it failed, yet one of them {kind}"
        wrong = [(got, want) for name, want in _reference(call.fn, call).items()
                 for got in [value.get(name)]
                 if isinstance(want, np.ndarray) and not np.allclose(got, want, rtol=1e-9, atol=1e-9)]
        if finite_only and not all(np.isfinite(got).all() for got, _ in wrong):
            continue
        seen += 1
        for got, want in wrong:
            yield call, got, want
    assert seen or not finite_only, f"{step_id}: said of the cases with finite numbers, where there is none"


def _check_relation(graded, step_id, text):
    """"On every case it failed, …": the relation holds of every wrong array returned, checked here
    with numbers, whatever the judge computed."""
    said = _RELATION.search(text)
    if not said:
        return
    for call, got, want in _related_arrays(graded, step_id, text):
        assert got.shape == want.shape, f"{step_id}: a relation said of an array of another shape"
        tol = dict(rtol=1e-6, atol=1e-8 * max(1.0, float(np.max(np.abs(want)))))
        if said.group(1).startswith("every number"):
            gap = got - want
            assert np.allclose(gap, gap.flat[0], **tol), f"{step_id}: no constant added to every number"
        elif said.group(1).startswith("each wrong array"):
            where = np.abs(want) > 1e-9
            factor = (got[where] / want[where]).flat[0]
            assert np.allclose(got, factor * want, **tol), f"{step_id}: no single factor"
            if said.group(4):  # the factor named as a size of the call
                size = float(judge._sizes_of(call)[said.group(4)])
                size = np.sqrt(size) if said.group(3) else size
                assert np.isclose(factor, 1 / size if said.group(2) else size, rtol=1e-6), \
                    f"{step_id}: the factor is not {said.group(0)}"
        else:
            axis = -1 if said.group(5) == "row" else -2
            if said.group(6) == "plus a constant":
                gap = got - want
                assert np.allclose(gap, np.take(gap, [0], axis=axis), **tol), f"{step_id}: no constant per {said.group(5)}"
            else:
                for line in np.moveaxis(got / np.where(want == 0, np.nan, want), axis, -1).reshape(-1, got.shape[axis]):
                    line = line[np.isfinite(line)]
                    assert line.size and np.allclose(line, line[0], rtol=1e-6, atol=1e-8), \
                        f"{step_id}: no factor per {said.group(5)}"


_SHAPE_SAID = re.compile(r"Each wrong shape (is the expected one with an extra axis of length 1|is the expected one "
                         r"without an axis of length 1|has one axis more than asked|has one axis fewer than asked)")


def _reshaped(graded, step_id):
    """(name, got, expected) of every array a failing call returned in a shape other than the reference's."""
    for call, kind, value in _failing(graded, step_id):
        if kind != "value":
            continue
        for name, want in _reference(call.fn, call).items():
            got = value.get(name)
            if isinstance(want, np.ndarray) and got.shape != want.shape:
                yield name, got, want


def _check_shape_advice(graded, step_id, text):
    """"Each wrong shape …": holds of every array returned in a shape other than the reference's."""
    said = _SHAPE_SAID.search(text)
    if not said:
        return
    seen = 0
    for _, got, want in _reshaped(graded, step_id):
        seen += 1
        squeezed = [n for n in got.shape if n != 1] == [n for n in want.shape if n != 1]
        more = got.ndim > want.ndim
        claim = said.group(1)
        assert more == ("extra" in claim or "more" in claim), f"{step_id}: {claim} of {got.shape} for {want.shape}"
        if "length 1" in claim:
            assert squeezed, f"{step_id}: {claim} of {got.shape} for {want.shape}"
        else:
            assert abs(got.ndim - want.ndim) == 1, f"{step_id}: {claim} of {got.shape} for {want.shape}"
    assert seen, f"{step_id}: a shape's advice where no shape is wrong"


def _check_raised_off_the_example(graded, step_id, text):
    """"It ran on the chapter's example … and raised on hidden cases …": the example's calls returned,
    and a hidden call raised."""
    if "It ran on the chapter's example" not in text:
        return
    labelled = list(zip(_labelled(graded, step_id), graded.outcomes[step_id]))
    assert all(outcome.raised is None for (case, _), outcome in labelled if case.public), \
        f"{step_id}: said to run on the example, where it raised"
    assert any(outcome.raised is not None for (case, _), outcome in labelled if not case.public), \
        f"{step_id}: said to raise on hidden cases, where none raised"


_WHERE_ONE = re.compile(r"It raised on every call where (.+?) (?:is|are) 1, and ran wherever")


def _check_raised_where_one(graded, step_id, text):
    """"It raised on every call where T is 1, and ran wherever it is larger": every call that raised
    has those sizes 1 (as its arguments hold them), and every call that returned has them larger."""
    said = _WHERE_ONE.search(text)
    if not said:
        return
    names = [name for name, words in judge._SIZE_WORDS.items() if words in said.group(1)]
    assert names and " and ".join(judge._SIZE_WORDS[name] for name in names) == said.group(1), said.group(1)
    for call, outcome in zip(_calls(graded, step_id), graded.outcomes[step_id]):
        sizes = judge._sizes_of(call)
        if outcome.raised is not None:
            assert all(sizes.get(name) == 1 for name in names), f"{step_id}: raised where {names} are not 1"
        elif outcome.value is not None:
            assert all(sizes.get(name, 1) > 1 for name in names), f"{step_id}: ran where {names} are 1"


_ROWS_REACHED = re.compile(r"On (.+?), your (output|change) is exactly the one (?:with the shift added to|that shifting) "
                           r"(no value row|value row \d+|value rows \[[\d, ]+\])(?: makes)?, where the call asks for "
                           r"(every value row|rows \[[\d, ]*\])(;|\.)")


def _check_rows_reached(graded, step_id, text):
    """"your output is exactly the one with the shift added to value rows …": the chapter's own
    function, called with those rows, gives the student's value on a failing call of that case."""
    said = _ROWS_REACHED.search(text)
    if said is None:
        return
    label, what, reached, _, _ = said.groups()
    rows = [int(row) for row in re.findall(r"\d+", reached)]
    fn = "shifted_output" if what == "output" else "output_change"
    fits = []
    for (case, call), outcome in zip(_labelled(graded, step_id), graded.outcomes[step_id]):
        if case.label == label and call.fn == fn and outcome.raised is None:
            kind, value = _value(fn, outcome)
            args = call.args[:3] if fn == "shifted_output" else call.args[:2]
            fits.append(kind == "value" and _same(value, _reference(fn, type(call)(fn, (*args, rows)))))
    assert any(fits), f"{step_id}: rows {rows} said to give the {what} on {label}, which they do not"


def _wrong_values(graded, step_id, said):
    """(value, expected) of every call of the step whose value is not the reference's; every such
    call returned a value (`said` of one that raised fails)."""
    for (case, call), outcome in zip(_labelled(graded, step_id), graded.outcomes[step_id]):
        kind, value = _value(call.fn, outcome)
        want = _reference(call.fn, call)
        if kind == "value" and _same(value, want):
            continue
        assert kind == "value", f"{step_id}: {said}, where a call raised"
        yield value, want


def _check_examples_merged(graded, step_id, text):
    """"the examples were joined along the positions": every failing batch value is the expected one
    with its batch axis merged into the positions."""
    if "the examples were joined along the positions" not in text:
        return
    for value, want in _wrong_values(graded, step_id, "examples said joined"):
        for name, part in want.items():
            got = value[name]
            assert got.shape == (part.shape[0] * part.shape[1],) + part.shape[2:] and np.allclose(
                got.reshape(part.shape), part, rtol=judge.RTOL, atol=judge.ATOL), f"{step_id}: {name} is not joined"


def _check_slots(graded, step_id, text):
    """"in the wrong slots of the batch": every failing batch value has the expected shape, and each
    of its slots holds some example's expected numbers, not every slot its own."""
    if "in the wrong slots of the batch" not in text:
        return
    for value, want in _wrong_values(graded, step_id, "examples said misplaced"):
        held = [set(range(len(part))) for part in list(want.values())[:1]][0]
        slots = [set(held) for _ in held]
        for name, part in want.items():
            got = value[name]
            assert got.shape == part.shape, f"{step_id}: examples said misplaced, but {name} has another shape"
            for b in range(len(part)):
                slots[b] &= {e for e in range(len(part))
                             if np.allclose(got[b], part[e], rtol=judge.RTOL, atol=judge.ATOL)}
        assert all(slots), f"{step_id}: a slot said to hold an example's numbers holds none"
        assert not all(b in examples for b, examples in enumerate(slots)), f"{step_id}: every slot holds its own"


_HOLDS = re.compile(r"your `(\w+)` holds the expected `(\w+)`(?: \(or ((?:`\w+`(?:, )?)+), the same numbers\))?")


def _check_parts_exchanged(graded, step_id, text):
    """"each wrong part holds what another part should": on every call that failed, each part named
    holds the expected value of the part (or parts) said, and not its own."""
    if "each wrong part holds what another part should" not in text:
        return
    held = _HOLDS.findall(text.split("each wrong part holds what another part should", 1)[1].split(". ", 1)[0])
    assert held, f"{step_id}: parts said exchanged, none named"
    for value, want in _wrong_values(graded, step_id, "parts said exchanged"):
        for name, first, rest in held:
            got, others = value[name], [first] + re.findall(r"`(\w+)`", rest)
            assert got.shape != want[name].shape or not np.allclose(got, want[name], rtol=judge.RTOL, atol=judge.ATOL), \
                f"{step_id}: {name} said to hold another part's numbers holds its own"
            for other in others:
                assert got.shape == want[other].shape and np.allclose(got, want[other], rtol=judge.RTOL, atol=judge.ATOL), \
                    f"{step_id}: {name} does not hold the expected {other}"


_DROPPED = re.compile(r"some numbers of each wrong array are 0 where the expected ones are not, and every other number "
                      r"is the expected one times ([0-9.e+-]+)")
_AFFINE = re.compile(r"each wrong array of yours is the expected one times the same factor \(([0-9.e+-]+)\) plus a constant"
                     r"(: \(1 - ε\)·A \+ ε/n with ε = ([0-9.e+-]+))?")
_ROWS_AFFINE = re.compile(r"each row of a wrong array is (?:the expected row )?(shifted and rescaled, with mean 0 and "
                          r"standard deviation 1|times a factor plus a constant, both of its own|one number repeated)")


def _check_more_relations(graded, step_id, text):
    """Dropout, a factor with a constant (label smoothing), rows shifted and rescaled (layer norm):
    each checked with numbers on every wrong array returned."""
    dropped, affine, rows = _DROPPED.search(text), _AFFINE.search(text), _ROWS_AFFINE.search(text)
    if not (dropped or affine or rows):
        return
    zeros = 0
    for _, got, want in _related_arrays(graded, step_id, text):
        tol = dict(rtol=1e-5, atol=1e-8 * max(1.0, float(np.max(np.abs(want)))))
        if dropped:
            gone = (got == 0) & (want != 0)
            zeros += int(gone.sum())
            assert np.allclose(got[~gone], float(dropped.group(1)) * want[~gone], **tol), f"{step_id}: not dropout"
        if affine:
            alpha = float(affine.group(1))
            beta = (1 - alpha) / want.shape[-1] if affine.group(2) else np.mean(got - alpha * want)
            assert np.allclose(got, alpha * want + beta, **tol), f"{step_id}: not the expected one times {alpha} plus a constant"
        if rows:
            for row, part in zip(got.reshape(-1, want.shape[-1]), want.reshape(-1, want.shape[-1])):
                if np.ptp(part) <= 1e-9:
                    continue
                if row.size >= 3:
                    fit = np.polyval(np.polyfit(part, row, 1), part)
                    assert np.allclose(row, fit, **tol), f"{step_id}: a row is not the expected row shifted and rescaled"
                if rows.group(1) == "one number repeated":
                    assert np.ptp(row) <= 1e-9 * max(1.0, float(np.max(np.abs(want)))), f"{step_id}: a row is not one number"
                if rows.group(1).startswith("shifted"):
                    assert abs(row.mean()) <= 1e-6 and abs(row.std() - 1) <= 1e-3, f"{step_id}: a row is not standardized"
    assert not dropped or zeros, f"{step_id}: dropout said where no number was dropped"


_WHOLE = re.compile(r"On every case it failed(?: with finite numbers)?, (each number of yours is the expected one (cut to a whole number, "
                    r"toward 0|rounded down)|every number of yours is a whole number, where the expected ones are not)")
_RUNNING = re.compile(r"each number of yours is the expected one plus all those before it (along each row|down each "
                      r"column|through the whole array in reading order): a running total")
_ALIASED = re.compile(r"every row of a wrong array is the expected (last|first) row")
_PERMUTED = re.compile(r"Each wrong array holds the expected numbers with its axes in (reverse order|another order)"
                       r"(?: \(`\w+` \[[\d, ]+\] for \[[\d, ]+\]: axes \(([\d, ]+)\) of the expected\))?")


def _check_whole_running_aliased(graded, step_id, text):
    """Whole numbers (an array of integers), a running total (an accumulator reset too seldom), and
    rows that are one row kept by reference: each checked with numbers on every wrong array."""
    whole, running, aliased = _WHOLE.search(text), _RUNNING.search(text), _ALIASED.search(text)
    if not (whole or running or aliased):
        return
    seen = 0
    for _, got, want in _related_arrays(graded, step_id, text):
        seen += 1
        tol = dict(rtol=1e-9, atol=1e-9 * max(1.0, float(np.max(np.abs(want)))))
        if whole:
            assert np.array_equal(got, np.trunc(got)), f"{step_id}: said whole numbers, where one is not"
            how = whole.group(2)
            if how:
                assert np.array_equal(got, (np.trunc if how.startswith("cut") else np.floor)(want)), \
                    f"{step_id}: not the expected numbers {how}"
        if running:
            total = {"along each row": lambda a: np.cumsum(a, axis=-1), "down each column": lambda a: np.cumsum(a, axis=-2)
                     }.get(running.group(1), lambda a: np.cumsum(a.ravel()).reshape(a.shape))
            assert np.allclose(got, total(want), **tol), f"{step_id}: not a running total {running.group(1)}"
        if aliased:
            row = want[..., -1:, :] if aliased.group(1) == "last" else want[..., :1, :]
            assert np.allclose(got, np.broadcast_to(row, want.shape), rtol=judge.RTOL, atol=judge.ATOL), \
                f"{step_id}: a row is not the expected {aliased.group(1)} row"
    assert seen, f"{step_id}: a relation said where no array is wrong"
    if whole and not whole.group(2):
        assert any(not np.array_equal(want, np.trunc(want)) for _, _, want in _related_arrays(graded, step_id, text)), \
            f"{step_id}: said the expected numbers are not whole, where they are"


_CLIPPED = re.compile(r"each wrong number of yours is the expected one cut off at ±([0-9.e+-]+), and every other")
_RESCALED = re.compile(r"(each row of a wrong array|each column of a wrong array|each wrong array) is the expected one "
                       r"(standardized|min-max scaled|divided by its largest absolute number)")


def _check_clipped_rescaled(graded, step_id, text):
    """Numbers clipped at ±c; rows, columns or whole arrays rescaled (z-scores, min-max, by the largest
    absolute number): each checked with numbers on every wrong array."""
    clipped, rescaled = _CLIPPED.search(text), _RESCALED.search(text)
    if not (clipped or rescaled):
        return
    seen = 0
    for _, got, want in _related_arrays(graded, step_id, text):
        seen += 1
        if clipped:
            bound = float(clipped.group(1))
            assert np.allclose(got, np.clip(want, -bound, bound), rtol=1e-6, atol=judge.ATOL), \
                f"{step_id}: not the expected numbers clipped at ±{bound}"
        if rescaled:
            axis = {"each row of a wrong array": -1, "each column of a wrong array": -2}.get(rescaled.group(1))
            keep = dict(axis=axis, keepdims=True)
            how = rescaled.group(2)
            if how == "standardized":
                spread = want.std(**keep)
                made = (want - want.mean(**keep)) / np.where(spread > 0, spread, 1)
            elif how == "min-max scaled":
                spread = want.max(**keep) - want.min(**keep)
                made = (want - want.min(**keep)) / np.where(spread > 0, spread, 1)
            else:
                largest = np.abs(want).max(**keep)
                made = want / np.where(largest > 0, largest, 1)
            flat = np.ptp(want, **keep) <= 1e-9 * max(1.0, float(np.max(np.abs(want))))  # any rescaling fits those
            assert np.allclose(np.where(flat, 0, got), np.where(flat, 0, made), rtol=1e-5, atol=1e-6), \
                f"{step_id}: {rescaled.group(1)} is not the expected one {how}"
    assert seen, f"{step_id}: a relation said where no array is wrong"


def _check_axes_permuted(graded, step_id, text):
    """"holds the expected numbers with its axes in reverse (another) order": every array returned
    in another shape is the expected one transposed so."""
    said = _PERMUTED.search(text)
    if not said:
        return
    seen = 0
    for name, got, want in _reshaped(graded, step_id):
        seen += 1
        order = (tuple(reversed(range(want.ndim))) if said.group(1) == "reverse order"
                 else tuple(int(axis) for axis in said.group(2).split(",")))
        moved = want.transpose(order)
        assert got.shape == moved.shape and np.allclose(got, moved, rtol=judge.RTOL, atol=judge.ATOL), \
            f"{step_id}: {name} is not the expected one with its axes {order}"
    assert seen, f"{step_id}: axes said moved where no shape is wrong"


_LEADING = "Each wrong array holds the expected numbers cut short, only their leading block"


def _check_leading_block(graded, step_id, text):
    """"holds the expected numbers cut short, only their leading block": on every failing call that
    returned a value, each array is the expected one, or its leading block (`want[:n, :m]`)."""
    if _LEADING not in text:
        return
    seen = 0
    for call, kind, value in _failing(graded, step_id):
        if kind != "value":
            continue
        for name, want in _reference(call.fn, call).items():
            got = value.get(name)
            if not isinstance(want, np.ndarray):
                continue
            seen += got.shape != want.shape
            assert got.ndim == want.ndim and all(mine <= theirs for mine, theirs in zip(got.shape, want.shape)), \
                f"{step_id}: {name} {got.shape} is no leading block of {want.shape}"
            block = want[tuple(slice(0, length) for length in got.shape)]
            assert np.allclose(got, block, rtol=judge.RTOL, atol=judge.ATOL), \
                f"{step_id}: {name} is not the expected numbers' leading block"
    assert seen, f"{step_id}: a leading block said where no shape is wrong"


def _check_zero_weights(graded, step_id, text):
    """"Your `mix` is wrong exactly where a row of weights holds a 0 before a weight that counts, and
    right everywhere else": each call's weights, looked at here row by row, hold such a 0 exactly
    where the call's numbers are not the reference's."""
    if "wrong exactly where a row of weights holds a 0 before a weight that counts" not in text:
        return
    for call, outcome in zip(_calls(graded, step_id), graded.outcomes[step_id]):
        assert call.fn == "mix" and outcome.raised is None and outcome.value is not None, step_id
        weights = np.asarray(call.args[0])
        interleaved = any(row[i] == 0 and row[j] != 0 for row in weights for i in range(len(row))
                          for j in range(i + 1, len(row)))
        kind, value = _value("mix", outcome)
        want = _reference("mix", call)["o"]
        right = kind == "value" and value["o"].shape == want.shape and np.allclose(
            value["o"], want, rtol=judge.RTOL, atol=judge.ATOL)
        assert interleaved != right, (step_id, weights, right)


def check(graded: Graded) -> None:
    """Assert every claim of every failing step's feedback."""
    for step in STEPS:
        result = graded.steps[step.id]
        if result.status == "passed":
            continue
        _check_named_mistakes(graded, step.id, result)
        _check_quoted_values(graded, step.id, result.feedback)
        _check_example_advice(graded, step.id, result.feedback)
        _check_crash_advice(graded, step.id, result.feedback)
        _check_message_advice(graded, step.id, result.feedback)
        _check_nonfinite(graded, step.id, result)
        _check_low_precision(graded, step.id, result)
        _check_slightly_off(graded, step.id, result)
        _check_half_precision(graded, step.id, result)
        _check_batch_allowed(graded, step.id, result)
        _check_carried(graded, result)
        _check_weight_claims(graded, step.id, result)
        _check_value_claims(graded, step.id, result)
        _check_relation(graded, step.id, result.feedback)
        _check_shape_advice(graded, step.id, result.feedback)
        _check_raised_off_the_example(graded, step.id, result.feedback)
        _check_raised_where_one(graded, step.id, result.feedback)
        _check_rows_reached(graded, step.id, result.feedback)
        _check_examples_merged(graded, step.id, result.feedback)
        _check_slots(graded, step.id, result.feedback)
        _check_parts_exchanged(graded, step.id, result.feedback)
        _check_more_relations(graded, step.id, result.feedback)
        _check_whole_running_aliased(graded, step.id, result.feedback)
        _check_axes_permuted(graded, step.id, result.feedback)
        _check_leading_block(graded, step.id, result.feedback)
        _check_clipped_rescaled(graded, step.id, result.feedback)
        _check_zero_weights(graded, step.id, result.feedback)
        if step.id == "batch":
            _check_batch(graded, result)
    assert BY_ID  # every step was read
