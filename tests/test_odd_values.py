"""Odd values, odd output and odd exceptions cost at most their own call: every call after them is
still run and graded, and no step says the worker failed. Real workers, real sandbox.

Each submission is the reference with one function redefined at the end of the module. A function
returning something no grader accepts (a structured array, a lying tuple, a value whose
description is larger than a frame may be) is `wrong-type` on that call; printing lone surrogates
or tampering with the capture of printed output changes nothing; an exception whose own code
misbehaves is still that call's exception.
"""
from __future__ import annotations

import pytest
from support import IN_CI, graded_in_worker, require_sandbox, variant

from autograder import cases, protocol, sandbox
from autograder.grading import Grader
from autograder.submission import load

SEED = 5
EX2, EX4 = "ex2_row_normalization", "ex4_shapes"
PREDICATE_CASES = sum(1 for case in cases.build(SEED)[EX2] if all(c.fn == "is_attention_weights" for c in case.calls))
"""Exercise 2's cases a wrong counterexample leaves passing: those of the predicate alone."""

COUNTEREXAMPLE = "\ndef column_normalized_counterexample():\n    {body}\n"
PREDICATE = "\ndef is_attention_weights(a):\n    {body}\n"
FACTS = ("\n_facts = head_facts\n\ndef head_facts(t, d_k, d_v):\n    facts = _facts(t, d_k, d_v)\n"
         "    {body}\n    return facts\n")
SCALE = "\n_scale = scale\n\ndef scale(s, d_k):\n    {body}\n    return _scale(s, d_k)\n"

ODD = {
    # printed output: kept short, written as the grader would write it, never refused
    "prints_lone_surrogates": (SCALE.format(body="print('\\ud800' * 700)"), {}),
    "prints_lone_surrogates_on_import": ("\nprint('\\udcff' * 700)\n", {}),
    "enlarges_its_own_output_capture": (SCALE.format(body="import sys\n    sys.stdout.cap = 10**6\n"
                                                          "    print('x' * 5000)"), {}),
    # a module-level name that refuses to be compared with the written answers' names
    "an_answer_key_that_refuses_comparison": ("\nclass K(str):\n    __hash__ = str.__hash__\n\n"
                                              "    def __eq__(self, other):\n        raise ValueError('no')\n\n\n"
                                              "del ANSWER_1\nglobals()[K('ANSWER_1')] = 'an answer'\n", {}),
    # values no reader takes
    "dict_key_with_a_lone_surrogate": (FACTS.format(body="facts['note\\udcff' + 'x' * 95] = 1.0"), {EX4: 0}),
    "structured_array": (COUNTEREXAMPLE.format(
        body="return np.zeros(3, dtype=[('f%d' % i, '<f8') for i in range(400)])"), {EX2: PREDICATE_CASES}),
    "tuple_whose_len_lies": (COUNTEREXAMPLE.format(
        body="class Lies(tuple):\n        _fields = ()\n        def __len__(self):\n            return 0\n"
             "    return Lies([0.0] * 10001)"), {EX2: PREDICATE_CASES}),
    "description_larger_than_a_frame": (COUNTEREXAMPLE.format(
        body="return {'k%099d' % i: {'j%099d' % j: 0.5 for j in range(100)} for i in range(100)}"), {EX2: PREDICATE_CASES}),
    "ten_million_numbers_made_in_an_instant": (COUNTEREXAMPLE.format(
        body="row = [0.0] * 10000\n    return [row] * 1000"), {EX2: PREDICATE_CASES}),
    "a_shape_ten_thousand_long": (FACTS.format(body="facts['score_shape'] = (1e308,) * 10000"), {EX4: 0}),
    # exceptions whose own code misbehaves
    "message_of_a_str_subclass": (PREDICATE.format(
        body="class S(str):\n        def __getitem__(self, key):\n            return 'y' * 5000\n"
             "    class E(Exception):\n        def __str__(self):\n            return S('x' * 400)\n"
             "    raise E()"), {EX2: 1}),
    "traceback_that_is_not_one": (PREDICATE.format(
        body="class E(Exception):\n        __traceback__ = property(lambda self: 42)\n    raise E('boom')"), {EX2: 1}),
}


@pytest.fixture(scope="module")
def grader():
    require_sandbox()
    return Grader(SEED)


def _graded(grader, tmp_path, source: str, mode: str | None = None):
    run, result = graded_in_worker(grader, tmp_path, source, mode)
    return run, {step.id: step for step in result.steps}


@pytest.mark.parametrize("mode", sandbox.AUTO_ORDER)
@pytest.mark.parametrize("name", sorted(ODD))
def test_an_odd_value_costs_only_its_own_calls(grader, tmp_path, name, mode):
    """In every sealed mode: what a value becomes is the child's own doing, whatever surrounds it."""
    problem = sandbox.available(mode)
    if problem:
        (pytest.fail if IN_CI else pytest.skip)(f"sandbox mode {mode}: {problem}")
    append, failing = ODD[name]  # the steps it fails, and how many of their cases still pass
    run, steps = _graded(grader, tmp_path, variant([], append=append), mode)
    assert run.lost is None, run.lost
    shown = {step_id: (step.status, step.diagnoses) for step_id, step in steps.items() if step.status != "passed"}
    assert set(shown) == set(failing), shown
    for step_id, still_passing in failing.items():  # the step's other cases are graded as usual
        step = steps[step_id]
        assert step.status in ("partial", "failed") and step.passed == still_passing, shown
        assert set(step.diagnoses) <= {"wrong-type", "crashed"}, shown
        assert len(step.feedback) < 2000, step.feedback[:300]


def test_a_submission_over_its_array_budget_loses_only_the_call_that_went_over(grader, tmp_path):
    """Results may carry MAX_JOB_BYTES of array data in all. The call that would go past it is
    refused; its bytes are not counted, so later results that still fit are graded as usual."""
    eight = protocol.MAX_VALUE_BYTES // 8  # float64s in the most one call may return
    source = variant([], append=(
        f"\n_zq = []\n\ndef zero_query_mixture(k, v):\n    _zq.append(1)\n"
        f"    return np.zeros({eight} if len(_zq) <= 6 else 3)\n"  # 6 calls of 8 MiB: 48 MiB
        f"\n_change = output_change\n_calls = []\n\ndef output_change(a, shift, rows=None):\n"
        f"    _calls.append(1)\n"  # 8 MiB, then 4, then 8 more: past the budget by 4
        f"    return np.zeros({eight} // (2 if len(_calls) == 2 else 1)) if len(_calls) <= 3 "
        f"else _change(a, shift, rows)\n"))
    run, steps = _graded(grader, tmp_path, source)
    assert run.lost is None, run.lost
    assert steps["ex1_zero_query"].diagnoses == ["wrong-type"]
    ex3 = [step for step, _ in grader.calls].index("ex3_value_shift")
    faults = [outcome.detail for outcome in run.outcomes[ex3] if outcome is not None and outcome.fault]
    assert faults == ["more array data than a submission may return"], faults
    assert steps["ex3_value_shift"].status == "error" and "crashed" in steps["ex3_value_shift"].diagnoses
    for step_id in ("ex4_shapes", "ex5_intervention", "head", "batch"):
        assert steps[step_id].status == "passed", (step_id, steps[step_id].feedback)


def test_a_step_cut_short_by_a_lost_run_says_so_on_the_call_it_lost(grader, tmp_path):
    """Where the grader gives up on a run in the middle of a step, that step's remaining calls are
    reported as lost, with the reason, instead of being passed over without a word."""
    run, _ = _graded(grader, tmp_path, variant([]))
    ex2 = [step for step, _ in grader.calls].index(EX2)
    run.lost = "the grading worker failed (a reason)"
    run.outcomes[ex2][4:] = [None] * (len(run.outcomes[ex2]) - 4)
    for later in run.outcomes[ex2 + 1:]:
        later[:] = [None] * len(later)
    steps = {step.id: step for step in grader.judge(load(tmp_path / "attention_head.py"), run, 0.0).steps}
    assert steps[EX2].status == "error" and steps[EX2].diagnoses == ["crashed"]
    assert "the grading worker failed (a reason)" in steps[EX2].feedback, steps[EX2].feedback
    assert all(steps[step].status == "error" and "not graded" in steps[step].feedback
               for step in ("ex3_value_shift", "ex4_shapes", "ex5_intervention"))
    assert steps["ex1_zero_query"].status == "passed"


def test_parts_of_a_run_that_never_ran_say_why_once_back_in_the_plan_s_order():
    """Every step's example runs first, then every step's hidden cases: `receive` puts each outcome
    back at its own step and call, and a part of which nothing came back (the run lost, or the module
    failing to import again in a fresh process) says so on each of its calls, never "skipped"."""
    from autograder import runner

    prepared = runner.prepare([("a", [("f", (1.0,)), ("f", (2.0,))]), ("b", [("g", (3.0,)), ("g", (4.0,))])],
                              None, [{0}, {0}])
    assert [step for step, _ in prepared.order] == [0, 1, 0, 1]  # a's example, b's, a's hidden call, b's
    for reimport in (None, "it raised an exception"):
        run = runner.Run(outcomes=[[None] * count for count in prepared.counts], imported=True,
                         order=prepared.order, sizes=prepared.sizes, reimport=reimport)
        run.outcomes[0][0] = runner.Outcome(value=1.0)
        run.outcomes[1][0] = runner.Outcome(fault="timeout")  # b's example did not finish
        run.outcomes[2][0] = runner.Outcome(value=2.0)  # then the fresh process ran a's hidden call
        runner._in_plan_order(run)
        assert [outcome.value for outcome in run.outcomes[0]] == [1.0, 2.0]
        assert run.outcomes[1][0].fault == "timeout"
        if reimport is None:
            assert run.outcomes[1][1] is None
        else:  # b's hidden call never ran: the fresh process that would have run it did not import
            assert run.outcomes[1][1].fault == "lost" and "importing your module again" in run.outcomes[1][1].detail
        runner._in_plan_order(run)  # once only
        assert [outcome.value for outcome in run.outcomes[0]] == [1.0, 2.0]
