"""The error carried forward by a second call: a failing step, called again on top of right earlier steps.

judge.py carries an earlier step's mistake forward where one of its models reproduces that
mistake. Where none does (a sum over the wrong axis inside a broadcast, cosine similarity for the
scores, float32 arithmetic, a hard-coded value), the judge cannot compute what a later step should
return on top of it, so the later step is asked directly: it is called again, in the sandbox, on
the same cases, with the failing earlier steps' functions replaced in the submission's module by
the chapter's own computation (§15.6; see inside.py). If it then passes every case, its own work
checks out and it keeps its points, carried from the earlier step; if not, or if the second call
raises, runs out of time or dies, it is graded on its own cases as before.

Only a step that fails, and that builds on a failing earlier step, is called again; never with its
own function replaced. What a step builds on is what the chapter's solution of it calls
(`Step.uses`) and, for an exercise, every step of the head, since a student's may call more (an
exercise that mixes with its own `mix`): the second call shows whether it did. Steps are judged in
dependency order, so an earlier step's status and whether its credit was carried are known when a
later step's are decided.
"""
from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from . import feedback, judge
from .cases import Case
from .results import StepResult
from .protocol import PER_EXAMPLE
from .runner import EXACT, Outcome, Run
from .steps import BY_ID, STEPS, Step


def requests(steps: list[StepResult], run: Run) -> list[tuple[int, list[str]]]:
    """The steps to call again (by their index in the plan), each with the names of the failing
    earlier steps' functions to replace; empty for a submission with nothing to verify this way."""
    if not run.imported or run.lost:
        return []
    by_id = {result.id: result for result in steps}
    found = []
    for number, step in enumerate(STEPS):
        result = by_id.get(step.id)
        provisional = step.id in run.provisional
        if result is None or result.status == "passed" or (result.carried_from and not provisional) \
                or "time-budget" in result.diagnoses:  # never run: nothing to verify
            continue
        names = _replaced(step, _failing(step, result, by_id, run.outcomes[number]))
        same = _same_function(step)
        if same and by_id[same].status not in ("passed", "not_implemented") \
                and not by_id[same].carried_from and result.status != "not_implemented":
            # The batch step calls the head's own function, which no stand-in may replace, and the
            # head fails (a mistake of its own, as far as is known yet). The batch step's own work is
            # to carry the batch axis through, which the head called on each example alone shows;
            # where the head builds on failing steps too, with those replaced by the chapter's, both
            # in the batch call and on each example (their mistake is told, and costs, where it is).
            names = names + [PER_EXAMPLE]
        if names:
            found.append((number, names))
    return found


def apply(steps: list[StepResult], asked: list[tuple[int, list[str]]], again: Run,
          cases: dict[str, list[Case]], expected: dict[str, list[list[dict]]],
          own: Run | None = None) -> list[StepResult]:
    """`steps` with the credit of each step that passed every case when called again carried
    forward from the earlier step where the mistake is (in dependency order, so a step that was
    carried itself is never named as the mistake). `own`: the submission's own run, which a
    batch called example by example is compared with."""
    by_id = {result.id: result for result in steps}
    provisional = own.provisional if own is not None else {}
    unpassed = []  # (plan index, names replaced, outcomes) of the steps that failed again
    for number, names in sorted(asked):
        step = STEPS[number]
        result = by_id[step.id]
        names, outcomes, each = _split_per_example(names, again.outcomes[number])
        # a call made again that raised inside a function it was made again without (the student's
        # own, kept in a default argument or an alias) shows nothing of the step's own work
        bypassed = any(outcome is not None and _inside(outcome, names) for outcome in outcomes)
        if each is not None and own is not None and not bypassed \
                and not _passes(cases[step.id], expected[step.id], outcomes) \
                and _failed_inside(cases[step.id], expected[step.id], own.outcomes[number], names) \
                and _each_example_alike(cases[step.id], expected[step.id], outcomes, each):
            # with the failing steps it builds on replaced, the head on each example alone gives what
            # the batch call gives: what is still wrong is the head's own mistake, on one sequence
            by_id[step.id] = _carried_per_example(step, result, by_id, names)
            continue
        if step.id in provisional:
            # Carried on exceptions alone, the credit is kept only on what calling it again shows: a
            # batch whose every call, made example by example, gives what the batch call gave (the
            # head's very exception, from the same line, on each example that raised); any other step
            # that passes with the chapter's functions in place, or raises just as before, from the
            # same line (code that never calls the functions replaced: the call again shows nothing).
            # Anything else (a wrong value, another exception, no end) gives it back its grade on its
            # own cases: a step cannot keep credit by raising where its own work would show.
            if names == [PER_EXAMPLE]:
                if own is None or not _each_example_alike(cases[step.id], expected[step.id], own.outcomes[number],
                                                          outcomes):
                    by_id[step.id] = provisional[step.id]
                continue
            if not _passes(cases[step.id], expected[step.id], outcomes):
                # (the batch, called again example by example too and not each example alike, above:
                # raising as before shows nothing of a batch axis)
                if own is None or each is not None or bypassed or not _raised_as_before(
                        cases[step.id], expected[step.id], own.outcomes[number], outcomes):
                    by_id[step.id] = provisional[step.id]
                continue
            # run past the exceptions with the chapter's functions in place, its own work checks out:
            # told as any step called again is, from the first cause
        if names == [PER_EXAMPLE]:
            if own is not None and _each_example_alike(cases[step.id], expected[step.id], own.outcomes[number],
                                                       outcomes):
                by_id[step.id] = _carried_per_example(step, result, by_id)
            continue
        if not _passes(cases[step.id], expected[step.id], outcomes):
            unpassed.append((number, names, outcomes))  # its grade stands
            continue
        replaced = [used for used in _may_use(step) if by_id[used].status != "passed"
                    and set(BY_ID[used].functions) & set(names)]
        wrong = [used for used in replaced if by_id[used].carried_from is None]  # mistakes of their own
        first = judge._first_causes(wrong)
        sources = first + [used for used in wrong if used not in first]
        if not sources:
            continue
        # Its codes are the earlier mistake's, as on the judge's own carried steps: what its first run
        # showed (a crash on the earlier step's None, a value that looked hard-coded) came from there,
        # and a code the line does not name would be one no sentence explains.
        codes = judge.carried_codes(result.diagnoses, sources, by_id)
        # where none of them has functions at all, why: one reason, or "not written yet" for several
        states = {judge.step_state(by_id[used], judge.unreached_functions(own) if own is not None else {})
                  for used in sources}
        unwritten = ((states.pop() if len(states) == 1 else "not_implemented")
                     if states <= {"not_implemented", feedback.UNREACHED, feedback.DISCARDED} else None)
        text = feedback.carried_feedback(step, sources, codes, result.total, replaced=names, unwritten=unwritten)
        by_id[step.id] = StepResult(step.id, step.points, step.points, result.status, text, codes,
                                    result.passed, result.total, list(result.case_passed),
                                    carried_from=judge.carried_source(sources, codes, by_id))
    # where a step called again shows a mistake of its own, that is told too: once every step's
    # credit is settled, so that what it adds decides nothing of what was carried from where
    settled = dict(by_id)
    for number, names, outcomes in unpassed:
        step = STEPS[number]
        first = own.outcomes[number] if own is not None and number < len(own.outcomes) else []
        if any(outcome is not None and outcome.raised and judge.raised_in(outcome.raised.get("where")) in names
               for outcome in first):  # its first run stopped in a function it builds on, before its own lines
            by_id[step.id] = _told_own(step, by_id[step.id], names, outcomes, cases, expected, settled)
    _through_carried(by_id, steps)
    return [by_id[result.id] for result in steps]


def _told_own(step: Step, result: StepResult, names: list[str], outcomes: list[Outcome | None],
              cases: dict[str, list[Case]], expected: dict[str, list[list[dict]]],
              by_id: dict[str, StepResult]) -> StepResult:
    """`result`, with what the step's call made again, on the chapter's functions in place of the
    failing ones it builds on, shows of its own code: a mistake a model names there, which the
    earlier steps' failures hid on its first run (an exercise that raised where the student's
    projection did). As `result` where the calls made again name nothing more."""
    if names == [PER_EXAMPLE] or not all(code in judge.READ_FROM_LOOK for code in result.diagnoses):
        return result  # (a model of its own already named on its first run is what it is told)
    per_case, position = [], 0
    for case in cases[step.id]:
        per_case.append(list(outcomes[position:position + len(case.calls)]))
        position += len(case.calls)
    # the steps whose functions were replaced stand as the chapter's: passed, nothing to carry
    earlier = {sid: (dataclasses.replace(done, status="passed", diagnoses=[], carried_from=None)
                     if set(BY_ID[sid].functions) & set(names) else done) for sid, done in by_id.items()}
    try:
        own = judge.grade_step(step, cases[step.id], expected[step.id], per_case, earlier)
    except Exception:  # what the first run said stands
        return result
    named = [code for code in own.diagnoses if code not in judge.READ_FROM_LOOK and code not in result.diagnoses]
    lines = own.feedback.splitlines()
    # its own account of the calls made again: what it was called with, what came back, and why
    end = next((i for i, line in enumerate(lines) if line.startswith("The task:")), len(lines))
    body = lines[1:end]
    if not body or own.status == "passed":
        return result
    shown = feedback.listed([f"`{name}`" for name in names])
    wrong = list(dict.fromkeys(case.calls[index].fn for case, index, outcome, want in
                               _each_call(cases[step.id], expected[step.id], outcomes)
                               if outcome is None or not judge._judge_call(case, index, outcome, want).ok))
    text = (result.feedback + f"\nCalled again with the chapter's {shown} in place of yours, your "
            f"{feedback.listed([f'`{fn}`' for fn in wrong])} {'is' if len(wrong) == 1 else 'are'} still wrong on "
            f"{own.total - own.passed} of {own.total} cases: a mistake of {'its' if len(wrong) == 1 else 'their'} "
            "own.\n" + "\n".join(body))
    return dataclasses.replace(result, feedback=text, diagnoses=list(result.diagnoses) + named)


def _through_carried(by_id: dict[str, StepResult], steps: list[StepResult]) -> None:
    """A step carried, on the first run, from an earlier step that was then itself carried from a
    still earlier one (the head, whose own work checks out once attention is replaced) names that
    first cause, through the step between: the student is sent where the mistake is."""
    for result in steps:
        current = by_id[result.id]
        between = current.carried_from
        if between is None or by_id[between].carried_from is None or current is not result:
            continue  # not carried, carried from a step with a mistake of its own, or carried here
        first, seen = between, {between}
        while by_id[first].carried_from is not None and by_id[first].carried_from not in seen:
            first = by_id[first].carried_from
            seen.add(first)
        step = BY_ID[result.id]
        # the codes the first cause names: the step between may have named others on the first
        # run (an edit of its own line that its second call showed to be the earlier mistake's)
        codes = judge.carried_codes(current.diagnoses, [first], by_id)
        text = feedback.carried_feedback(step, [first], codes, current.total, through=between)
        by_id[result.id] = StepResult(step.id, current.score, current.max_score, current.status, text,
                                      codes, current.passed, current.total, list(current.case_passed),
                                      carried_from=first)


def _raised_alike(one: Outcome | None, other: Outcome | None) -> bool:
    """Did both calls raise the very same exception: its type, its message and the line it came from?"""
    return bool(one is not None and other is not None and one.raised and other.raised
                and all(one.raised.get(key) == other.raised.get(key) for key in ("type", "message", "where")))


def _inside(outcome: Outcome, names: list[str]) -> bool:
    """Did the call raise inside one of the submission's functions `names`?"""
    return bool(outcome.raised) and judge.raised_in(outcome.raised.get("where")) in names


def _passed_or_raised(calls, raised_well) -> bool:
    """Did each call (case, call index, outcome, expected value) return the reference's value, or
    raise as `raised_well(outcome, position)` accepts? A call that never ended does neither."""
    for position, (case, index, outcome, want) in enumerate(calls):
        if outcome is None or outcome.fault:
            return False
        if outcome.raised:
            if not raised_well(outcome, position):
                return False
        elif not judge._judge_call(case, index, outcome, want).ok:
            return False
    return True


def _raised_as_before(cases: list[Case], expected: list[list[dict]], first: list[Outcome | None],
                      again: list[Outcome | None]) -> bool:
    """Did every call made again either pass, or raise the very exception (type, message and line)
    it raised the first time?"""
    return _passed_or_raised(itertools.islice(_each_call(cases, expected, again), len(first)),
                             lambda outcome, position: _raised_alike(outcome, first[position]))


def _each_call(cases: list[Case], expected: list[list[dict]], outcomes: list[Outcome | None]):
    """(case, call index, outcome or None, expected value) of every planned call, in order."""
    position = 0
    for case, wanted in zip(cases, expected):
        for index in range(len(case.calls)):
            yield case, index, outcomes[position] if position < len(outcomes) else None, wanted[index]
            position += 1


def _failed_inside(cases: list[Case], expected: list[list[dict]], outcomes: list[Outcome | None],
                   names: list[str]) -> bool:
    """Did every call of the step's own run that failed raise inside one of the functions `names`
    (the failing steps it builds on)? What was called again with those replaced may then speak for
    it; a call that failed otherwise (a head that refuses a batch itself, and behaves once it finds
    itself called again) shows its own fault, and nothing called again takes that back."""
    return _passed_or_raised(_each_call(cases, expected, outcomes), lambda outcome, _: _inside(outcome, names))


def _carried_per_example(step: Step, result: StepResult, by_id: dict[str, StepResult],
                         replaced: list[str] = ()) -> StepResult:
    """The batch step's credit, carried from the head: on each example alone the student's head
    returns what it returned for that example within the batch, so the batch axis is carried
    through, and what is wrong is what is wrong on one sequence. `replaced`: the functions of the
    failing steps the head builds on, replaced by the chapter's for both calls; their mistakes are
    named too, and every code of those steps and the head's (the batch's first run may have shown
    one of them alone, stopped by the other)."""
    used = _same_function(step)
    others = [earlier for earlier in _may_use(step) if earlier != used and by_id[earlier].status != "passed"
              and not by_id[earlier].carried_from and set(BY_ID[earlier].functions) & set(replaced)]
    sources = others + [used]
    codes = judge.carried_codes([] if others else result.diagnoses, sources, by_id)
    text = feedback.carried_feedback(step, sources, codes, result.total, per_example=True,
                                     replaced=replaced if others else None)
    return StepResult(step.id, step.points, step.points, result.status, text, codes, result.passed, result.total,
                      list(result.case_passed), carried_from=judge.carried_source(sources, codes, by_id))


def _split_per_example(names: list[str], outcomes: list[Outcome | None]
                       ) -> tuple[list[str], list[Outcome | None], list[Outcome | None] | None]:
    """(the functions replaced, the step's outcomes called again, each example's alone or None).
    Called again with functions replaced and example by example too (`PER_EXAMPLE` beside other
    names), each batch call returned the pair (the batch call, the examples alone); a call that
    raised or did not finish shows neither, and its examples alone show nothing."""
    if PER_EXAMPLE not in names or names == [PER_EXAMPLE]:
        return names, outcomes, None
    whole, each = [], []
    for outcome in outcomes:
        if outcome is not None and outcome.raised is None and outcome.fault is None \
                and type(outcome.value) is tuple and len(outcome.value) == 2:
            whole.append(dataclasses.replace(outcome, value=outcome.value[0]))
            each.append(dataclasses.replace(outcome, value=outcome.value[1], output=""))
        else:
            whole.append(outcome)
            each.append(None)
    return [name for name in names if name != PER_EXAMPLE], whole, each


def _same_function(step: Step) -> str | None:
    """The earlier step whose function this step calls too (the head's, for the batch), or None."""
    return next((used for used in step.uses if BY_ID[used].functions == step.functions), None)


def _each_example_alike(cases: list[Case], expected: list[list[dict]], batch: list[Outcome | None],
                        each: list[Outcome | None]) -> bool:
    """Did every batch call, made again once per example, return for each example what the batch
    call returned for it (within the grading tolerance), or raise the very exception the batch call
    raised, from the same line? A call that raised only one of the two times, ran out of time or
    returned another kind of value either time shows nothing; nor does a head that gives one and the
    same result for different examples on every call (zeros, or the example's own values read from
    outside): a batch axis it never reads is not carried through. Nor, above all, does a head that
    raised on every call: alike or not, its exceptions show nothing of a batch axis (a stub raising
    ValueError would otherwise earn the batch's points), so some call must return each example's
    own numbers."""
    position, varied = 0, False
    for case, wanted in zip(cases, expected):
        for index, call in enumerate(case.calls):
            whole = batch[position] if position < len(batch) else None
            alone = each[position] if position < len(each) else None
            position += 1
            if whole is None or alone is None or whole.fault or alone.fault:
                return False
            if whole.raised or alone.raised:
                # the very exception, from the same line, on the batch and on its examples alone:
                # the head fails on one sequence as it fails on the batch
                if not _raised_alike(whole, alone):
                    return False
                continue
            examples = call.args[0]
            if not isinstance(alone.value, tuple) or len(alone.value) != len(examples):
                return False
            try:
                together = wanted[index] if whole.value is EXACT else judge.canonical(call.fn, whole.value, wanted[index])
                apart = [judge.canonical(call.fn, value) for value in alone.value]
            except judge.WrongType:
                # a value of the wrong type (the output alone, for the pair): of that same type, part
                # by part, on the batch as on each example
                together, apart = _parts(whole.value), [_parts(value) for value in alone.value]
                if together is None or any(one is None or one.keys() != together.keys() for one in apart):
                    return False
            for name, part in together.items():
                pieces = [value[name] for value in apart]
                if not isinstance(part, np.ndarray) or any(piece.shape != part.shape[1:] for piece in pieces):
                    return False
                if not judge.allclose(np.stack(pieces), part, judge.RTOL, judge.ATOL, equal_nan=True, keep=False):
                    return False
                varied = varied or any(not np.array_equal(piece, pieces[0], equal_nan=True) for piece in pieces[1:])
    return varied and position == len(batch) == len(each)


def _parts(value, depth: int = 3) -> dict | None:
    """The arrays of a value of the wrong type, by place (an array alone; a tuple, list or dict of
    arrays, or of such tuples, lists and dicts: `(o, a, (q, k, v))`), as float arrays; None for
    anything else."""
    if type(value) is np.ndarray:
        return {None: value.astype(float)} if value.dtype.kind in "fiu" else None
    if not depth or not isinstance(value, (dict, tuple, list)) or not value:
        return None
    found = {}
    for key, part in (value.items() if isinstance(value, dict) else enumerate(value)):
        inner = _parts(part, depth - 1)
        if inner is None:
            return None
        found.update({(key,) if place is None else (key,) + place: array for place, array in inner.items()})
    return found


def _failing(step: Step, result: StepResult, by_id: dict[str, StepResult], outcomes: list[Outcome | None]) -> list[str]:
    """The earlier steps this one builds on that do not pass (for a step that is not implemented,
    only those its NotImplementedError came from), as the judge finds them."""
    came_from = {judge.raised_in((outcome.raised or {}).get("where")) for outcome in outcomes if outcome is not None}
    failing = judge._failing_uses(step, result.status, came_from - {None}, by_id)
    if failing and result.status == "not_implemented":
        # The NotImplementedError came from an earlier step; the other failing steps it builds on
        # would raise theirs next (every one left as `pass` or as the stub alike): all are replaced.
        failing = judge._failing_uses(step, "failed", set(), by_id)
    if result.status != "not_implemented":
        # and the other steps of the head an exercise may call, whose own work does not check out
        # (one carried forward from an earlier step runs right once that step's function is replaced)
        failing += [used for used in _may_use(step) if used not in failing and used in by_id
                    and by_id[used].status != "passed" and not by_id[used].carried_from]
    return failing


def _may_use(step: Step) -> list[str]:
    """The earlier steps a student's solution of `step` may call: those the chapter's calls, and for
    an exercise every step of the head too, whose functions the chapter can stand in for
    (inside.CHAPTER_NAMES); the head's own steps call what the chapter's do."""
    chapter = judge._all_uses(step)
    head = judge._all_uses(BY_ID["head"]) + ["head"]
    if step.id in head or step.id == "batch":
        return chapter
    return chapter + [used for used in head if used not in chapter]


def _replaced(step: Step, failing: list[str]) -> list[str]:
    """The functions of the failing earlier steps, for the chapter's computation to stand in for (it
    has every function another step builds on: inside.CHAPTER_NAMES), never the step's own (`batch`
    is the head's function, called on a batch)."""
    names = [fn for used in failing for fn in BY_ID[used].functions if fn not in step.functions]
    return list(dict.fromkeys(names))


def _passes(cases: list[Case], expected: list[list[dict]], outcomes: list[Outcome | None]) -> bool:
    """Did every call of every case return the reference's value (grading's own comparison)?"""
    calls = list(_each_call(cases, expected, outcomes))
    return len(calls) == len(outcomes) and all(
        outcome is not None and judge._judge_call(case, index, outcome, want).ok for case, index, outcome, want in calls)
