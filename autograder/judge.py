"""The judge: turns what a submission returned into per-step scores, statuses and diagnoses.

It runs in the grader's own process and never touches submission code: its inputs are the plain
values the runner brought back. Expected values come from the reference solution, run here on
the same inputs.

Scoring: a step's points are split evenly across its cases. A case passes when every call in it
returns the right types and shapes, matches the reference within 1e-9 (absolute and relative),
and leaves its arguments unchanged. The step's status is `passed` (every case), `partial` (some),
`failed` (none), `not_implemented` (every call still raises NotImplementedError), `timeout` (a
call ran past its limit) or `error` (a crash, an exit call, or a module that would not import).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import numpy as np

from . import diagnoses, feedback
from .cases import Case
from .child import Bad
from .runner import Outcome, Run
from .steps import BY_ID, STEPS, Step

RTOL = ATOL = 1e-9
MODEL_RTOL, MODEL_ATOL = 1e-6, 1e-8

# What each function returns: ("array", name), ("tuple", names), ("dict", names), ("bool",), ("facts",).
RETURNS: dict[str, tuple] = {
    "project_qkv": ("tuple", ("q", "k", "v")),
    "scores": ("array", "d"),
    "scale": ("array", "s"),
    "softmax_rows": ("array", "a"),
    "mix": ("array", "o"),
    "attention": ("tuple", ("o", "a")),
    "self_attention_head": ("tuple", ("o", "a")),
    "zero_query_mixture": ("tuple", ("weights", "output")),
    "is_attention_weights": ("bool",),
    "column_normalized_counterexample": ("array", "counterexample"),
    "shifted_output": ("array", "output"),
    "output_change": ("array", "change"),
    "head_facts": ("facts",),
    "value_intervention": ("dict", ("weights_before", "weights_after", "output_before", "output_after")),
}
FACTS = ("divisor", "score_shape", "output_shape", "softmax_axis")
NOT_IMPLEMENTED = ("NotImplementedError", "MissingName")
# Codes decided by probes, not models: never dropped in favour of an earlier step's diagnosis.
_PROBE_CODES = {"mutates-input", "timeout", "exit-called", "crashed", "memory-limit", "not-implemented"}


@dataclass
class StepResult:
    id: str
    score: float
    max_score: float
    status: str
    feedback: str
    diagnoses: list[str]
    passed: int
    total: int


class WrongType(Exception):
    pass


# ------------------------------------------------------------------ reading returned values ------


def _as_array(value, name: str) -> np.ndarray:
    if isinstance(value, Bad):
        raise WrongType(f"{name} has type {value.type}, not a plain numpy array")
    if value is None:
        raise WrongType(f"{name} is None; did you forget a `return`?")
    if isinstance(value, bool):
        raise WrongType(f"{name} is a bool, not an array")
    if isinstance(value, np.ndarray):
        return value.astype(np.float64)
    if isinstance(value, (list, tuple, int, float)):
        try:
            return np.asarray(_plain(value), dtype=np.float64)
        except (TypeError, ValueError):
            raise WrongType(f"{name} is a {type(value).__name__} that is not a rectangular array of numbers")
    raise WrongType(f"{name} has type {type(value).__name__}, not numpy.ndarray")


def _plain(value):
    if isinstance(value, Bad) or value is None:
        raise TypeError
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _as_shape(value, name: str) -> tuple:
    if isinstance(value, (list, tuple)) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                               and float(v).is_integer() for v in value):
        return tuple(int(v) for v in value)
    raise WrongType(f"{name} should be a tuple of ints, got {_kind(value)}")


def _kind(value) -> str:
    return value.type if isinstance(value, Bad) else type(value).__name__


def canonical(fn: str, value) -> dict:
    """The returned value as a dict of named parts; raises WrongType for anything unusable."""
    spec = RETURNS[fn]
    if spec[0] == "array":
        return {spec[1]: _as_array(value, spec[1])}
    if spec[0] == "tuple":
        names = spec[1]
        if not isinstance(value, (tuple, list)):
            raise WrongType(f"expected a tuple {tuple(names)}, got {_kind(value)}".replace("'", ""))
        if len(value) != len(names):
            raise WrongType(f"expected a tuple of {len(names)} ({', '.join(names)}), got {len(value)} items")
        return {name: _as_array(item, name) for name, item in zip(names, value)}
    if spec[0] == "dict":
        if not isinstance(value, dict):
            raise WrongType(f"expected a dict with keys {', '.join(spec[1])}, got {_kind(value)}")
        missing = [name for name in spec[1] if name not in value]
        if missing:
            raise WrongType(f"the dict is missing {', '.join(missing)}")
        return {name: _as_array(value[name], name) for name in spec[1]}
    if spec[0] == "bool":
        if isinstance(value, bool):
            return {"value": value}
        raise WrongType(f"expected True or False, got {_kind(value)}")
    if not isinstance(value, dict):
        raise WrongType(f"expected a dict with keys {', '.join(FACTS)}, got {_kind(value)}")
    missing = [name for name in FACTS if name not in value]
    if missing:
        raise WrongType(f"the dict is missing {', '.join(missing)}")
    divisor = value["divisor"]
    if isinstance(divisor, bool) or not isinstance(divisor, (int, float)):
        raise WrongType(f"divisor should be a float, got {_kind(divisor)}")
    axis = value["softmax_axis"]
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise WrongType(f"softmax_axis should be an int, got {_kind(axis)}")
    return {"divisor": float(divisor), "score_shape": _as_shape(value["score_shape"], "score_shape"),
            "output_shape": _as_shape(value["output_shape"], "output_shape"), "softmax_axis": axis}


def differences(actual: dict, expected: dict, public: bool, rtol=RTOL, atol=ATOL) -> list[str]:
    """Every way `actual` differs from `expected` (both canonical); empty when they agree."""
    found = []
    for name, want in expected.items():
        got = actual.get(name)
        if isinstance(want, np.ndarray):
            if got.shape != want.shape or not np.allclose(got, want, rtol=rtol, atol=atol):
                found.append(feedback.array_mismatch(got, want, public, name) if rtol == RTOL else name)
        elif name == "softmax_axis":
            if got not in ((1, -1) if want == -1 else (want,)):
                found.append(f"softmax_axis is {got!r}" + (f", expected {want!r}" if public else ""))
        elif name == "divisor":
            if not np.isclose(got, want, rtol=rtol, atol=atol):
                found.append(f"divisor is {got!r}" + (f", expected {want!r}" if public else ""))
        elif got != want:
            found.append(f"{name} is {got!r}" + (f", expected {want!r}" if public else ""))
    return found


def _matches_model(actual: dict, model_value, fn: str, expected: dict) -> bool:
    if RETURNS[fn][0] == "facts":
        parts = {name: (tuple(v) if isinstance(v, (tuple, list)) else v) for name, v in model_value.items()}
        return all(not differences({n: actual[n]}, {n: v}, True, MODEL_RTOL, MODEL_ATOL)
                   and differences({n: expected[n]}, {n: v}, True) for n, v in parts.items())
    try:
        model = canonical(fn, model_value)
    except WrongType:
        return False
    if not differences(model, expected, True, MODEL_RTOL, MODEL_ATOL):
        return False  # on this case the misconception gives the right answer: it proves nothing
    for name, want in model.items():
        got = actual[name]
        if isinstance(want, np.ndarray) and got.shape != want.shape:
            return False
    return not differences(actual, model, True, MODEL_RTOL, MODEL_ATOL)


# ------------------------------------------------------------------ grading one step ------------


@dataclass
class _CallVerdict:
    ok: bool
    kind: str  # ok, mismatch, wrong-type, raised, not-implemented, fault, skipped
    detail: str = ""
    codes: list[str] = field(default_factory=list)
    model_codes: list[str] = field(default_factory=list)
    nonfinite: bool = False
    close: bool = False
    shape: bool = False


def _judge_call(case: Case, call_index: int, outcome: Outcome | None, expected: dict) -> _CallVerdict:
    call = case.calls[call_index]
    if outcome is None:
        return _CallVerdict(False, "skipped", "not run: an earlier call in this step did not finish")
    if outcome.fault:
        code = {"timeout": "timeout", "exit": "exit-called", "memory": "memory-limit"}.get(outcome.fault, "crashed")
        detail = {"timeout": "it ran past the time limit", "exit": "it called exit",
                  "memory": "it ran out of memory"}.get(outcome.fault, f"its process died ({outcome.detail})")
        return _CallVerdict(False, "fault", f"The call did not finish: {detail}.", [code])
    if outcome.raised:
        kind = outcome.raised.get("type", "Exception")
        if kind in NOT_IMPLEMENTED:
            return _CallVerdict(False, "not-implemented", "", ["not-implemented"])
        where = outcome.raised.get("where")
        message = f"It raised {kind}: {outcome.raised.get('message', '')}" + (f" ({where})" if where else "")
        return _CallVerdict(False, "raised", message, ["crashed"])
    mutated = [inspect_names(call.fn)[i] for i in outcome.mutated if i < len(inspect_names(call.fn))]
    try:
        actual = canonical(call.fn, outcome.value)
    except WrongType as exc:
        return _CallVerdict(False, "wrong-type", f"Wrong type: {exc}.")
    if call.fn == "column_normalized_counterexample":
        problems = _counterexample_problems(actual["counterexample"])
        verdict = _CallVerdict(not problems, "ok" if not problems else "mismatch", "\n".join(problems))
    else:
        found = differences(actual, expected, case.public)
        verdict = _CallVerdict(not found, "ok" if not found else "mismatch", "\n".join(found))
        if found:
            _explain(verdict, call, actual, expected)
    if mutated:
        verdict.ok = False
        verdict.codes.append("mutates-input")
        verdict.detail = "\n".join(filter(None, [verdict.detail, f"It changed its argument(s): {', '.join(mutated)}."]))
    return verdict


def _explain(verdict: _CallVerdict, call, actual: dict, expected: dict) -> None:
    """Attach what the mismatch reveals: models matched, shapes, non-finite values, precision."""
    for code, model in diagnoses.MODELS.get(call.fn, ()):
        try:
            with np.errstate(all="ignore"):
                value = model(*call.args)
        except Exception:
            continue
        if code not in verdict.model_codes and _matches_model(actual, value, call.fn, expected):
            verdict.model_codes.append(code)
    arrays = [(actual[n], w) for n, w in expected.items() if isinstance(w, np.ndarray)]
    verdict.shape = any(got.shape != want.shape for got, want in arrays)
    verdict.nonfinite = any(got.shape == want.shape and not np.isfinite(got).all() and np.isfinite(want).all()
                            for got, want in arrays)
    verdict.close = bool(arrays) and all(got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-6)
                                         for got, want in arrays)
    if call.fn == "is_attention_weights":
        verdict.model_codes.extend(_predicate_codes(call.args[0], actual["value"]))


def _predicate_codes(matrix: np.ndarray, answer: bool) -> list[str]:
    if matrix.ndim != 2:
        return []
    rows, cols = matrix.sum(axis=1), matrix.sum(axis=0)
    if answer and (matrix < 0).any():
        return ["predicate-ignores-negatives"]
    if answer and np.allclose(cols, 1.0, atol=1e-9, rtol=0) and not np.allclose(rows, 1.0, atol=1e-9, rtol=0):
        return ["accepts-column-stochastic"]
    if not answer and np.all(np.abs(rows - 1.0) <= 1e-9) and not np.all(rows == 1.0) and (matrix >= 0).all():
        return ["predicate-exact-equality"]
    return []


def _counterexample_problems(matrix: np.ndarray) -> list[str]:
    if matrix.shape != (3, 3):
        return [f"counterexample has shape {list(matrix.shape)}, expected [3, 3]."]
    problems = []
    if (matrix < 0).any() or not np.isfinite(matrix).all():
        problems.append("Some entries are negative or not finite; every entry must be non-negative.")
    if not np.allclose(matrix.sum(axis=0), 1.0, atol=1e-9, rtol=0):
        problems.append("Its columns do not all sum to one.")
    if np.isclose(matrix[0].sum(), 1.0, atol=1e-9, rtol=0):
        problems.append("Its first row sums to one, so receiver 1 still gets a valid mixture.")
    return problems


_NAMES: dict[str, tuple[str, ...]] = {}


def inspect_names(fn: str) -> tuple[str, ...]:
    """The argument names of a contract function, read from the reference's signature."""
    if fn not in _NAMES:
        from solutions import attention_head as reference

        _NAMES[fn] = tuple(inspect.signature(getattr(reference, fn)).parameters)
    return _NAMES[fn]


def grade_step(step: Step, cases: list[Case], expected: list[list[dict]], outcomes: list[list[Outcome | None]],
               earlier: dict[str, StepResult]) -> StepResult:
    verdicts = [[_judge_call(case, i, outcomes[c][i], expected[c][i]) for i in range(len(case.calls))]
                for c, case in enumerate(cases)]
    passed = [all(v.ok for v in case_verdicts) for case_verdicts in verdicts]
    flat = [v for case_verdicts in verdicts for v in case_verdicts]
    total = len(cases)
    score = round(step.points * sum(passed) / total, 2)

    codes: list[str] = []

    def add(code):
        if code not in codes:
            codes.append(code)

    for v in flat:
        for code in v.codes:
            add(code)
    failed_values = [v for v in flat if v.kind == "mismatch"]
    for code in dict.fromkeys(c for v in failed_values for c in v.model_codes):
        hits = sum(code in v.model_codes for v in failed_values)
        if hits * 2 >= len(failed_values):
            add(code)
    normal = [vs for case, vs in zip(cases, verdicts) if case.kind != "large"]
    large = [vs for case, vs in zip(cases, verdicts) if case.kind == "large"]
    if large and all(all(v.ok for v in vs) for vs in normal) and any(v.nonfinite for vs in large for v in vs):
        add("unstable-softmax")
    elif any(v.nonfinite for v in failed_values):
        add("non-finite")
    if any(v.shape and not v.model_codes for v in failed_values):
        add("wrong-shape")
    if failed_values and all(v.close for v in failed_values) and not any(v.model_codes for v in failed_values):
        add("low-precision")
    example_ok = [ok for case, ok in zip(cases, passed) if case.public]
    hidden_ok = [ok for case, ok in zip(cases, passed) if not case.public]
    if example_ok and all(example_ok) and hidden_ok and not any(hidden_ok) and not codes:
        add("hard-coded")
    if step.id == "batch":  # only a head that works on one sequence can be blamed on the batch axis
        head_ok = earlier.get("head") is not None and earlier["head"].status == "passed"
        if not head_ok and "batch-axes-mixed" in codes:
            codes.remove("batch-axes-mixed")
        elif head_ok and not all(passed) and any(v.kind in ("mismatch", "raised", "wrong-type") for v in flat):
            add("batch-axes-mixed")

    kinds = {v.kind for v in flat}
    if all(v.kind == "not-implemented" for v in flat):
        status = "not_implemented"
    elif all(passed):
        status = "passed"
    elif "fault" in kinds and any("timeout" in v.codes for v in flat):
        status = "timeout"
    elif "fault" in kinds:
        status = "error"
    else:
        status = "partial" if any(passed) else "failed"

    root = [used for used in _all_uses(step) if used in earlier and earlier[used].status != "passed"
            and status not in ("passed", "not_implemented")]
    # When an earlier step's misconception explains this one, name that one only: a composite result
    # can match two models at once (k @ q.T is also W_Q and W_K swapped).
    upstream = {code for used in root for code in earlier[used].diagnoses}
    if upstream & set(codes):
        codes = [code for code in codes if code in upstream or code in _PROBE_CODES]
    first = _first_failure(cases, verdicts)
    shown, detail = (None, "")
    if first is not None:
        case, index, verdict = first
        shown = f"{case.calls[index].shown(inspect_names(case.calls[index].fn))} on {case.label}"
        detail = verdict.detail
    text = feedback.step_feedback(step, status, sum(passed), total, codes, shown, detail, root)
    return StepResult(step.id, score, step.points, status, text, codes, sum(passed), total)


def _all_uses(step: Step) -> list[str]:
    seen: list[str] = []
    for used in step.uses:
        for inner in _all_uses(BY_ID[used]) + [used]:
            if inner not in seen:
                seen.append(inner)
    return seen


def _first_failure(cases, verdicts):
    """The failing call to show: the public example first, then the first hidden one."""
    order = sorted(range(len(cases)), key=lambda c: not cases[c].public)
    for c in order:
        for i, verdict in enumerate(verdicts[c]):
            if not verdict.ok and verdict.kind not in ("skipped", "not-implemented"):
                return cases[c], i, verdict
    return None


def grade_run(run: Run, plan_cases: dict[str, list[Case]], expected: dict[str, list[list[dict]]]) -> list[StepResult]:
    """Grade every step of one submission's run, in step order."""
    results: dict[str, StepResult] = {}
    if not run.imported:
        return _unimportable(run)
    for number, step in enumerate(STEPS):
        outcomes = run.outcomes[number]
        per_case, position = [], 0
        for case in plan_cases[step.id]:
            per_case.append(outcomes[position:position + len(case.calls)])
            position += len(case.calls)
        if run.lost and all(o is None for o in outcomes):
            results[step.id] = StepResult(step.id, 0.0, step.points, "error",
                                          f"{step.title}: not graded: {run.lost}.", ["crashed"], 0, len(per_case))
            continue
        results[step.id] = grade_step(step, plan_cases[step.id], expected[step.id], per_case, results)
    return list(results.values())


def _unimportable(run: Run) -> list[StepResult]:
    if run.import_fault == "timeout":
        status, codes = "timeout", ["timeout"]
        reason = "Your module did not finish running within the time limit when it was imported."
    elif run.import_fault == "exit":
        status, codes = "error", ["exit-called"]
        reason = "Your module ended its own process while it was being imported."
    elif run.import_fault or run.lost:
        status, codes = "error", ["crashed"]
        reason = f"Your module's process died while it was being imported ({run.import_fault or run.lost})."
    else:
        error = run.import_error or {}
        status = "error"
        codes = ["exit-called"] if error.get("type") == "ExitCalled" else ["crashed"]
        where = f" ({error['where']})" if error.get("where") else ""
        reason = (f"Your module could not be imported: it raised {error.get('type', 'an error')}: "
                  f"{error.get('message', '')}{where}.")
    lines = feedback.diagnosis_lines(codes)
    return [StepResult(step.id, 0.0, step.points, status,
                       "\n".join([f"{step.title}: not graded.", reason] + lines), list(codes), 0, 1)
            for step in STEPS]
