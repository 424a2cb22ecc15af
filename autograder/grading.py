"""Grading one submission or many: cases and expected values once per seed, runs in parallel.

The reference solution runs here, in the grader's process, on the hidden cases; submissions run
only in workers. One worker per core serves a queue of submissions, each worker holding the next
few ready behind the one it runs; a submission that breaks its worker costs only its own remaining
steps, and the worker is restarted for the next ones (which get them again if they had not begun).
"""
from __future__ import annotations

import copy
import dataclasses
import queue
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from . import carry, judge, sandbox
from . import cases as cases_module
from .results import SubmissionResult, unreadable
from .runner import Limits, Worker, default_jobs, prepare
from .steps import ANSWERS, STEPS
from .submission import Submission, SubmissionError, load, shown_name


IN_FLIGHT = 4
"""Jobs sent to a worker and not yet received, at most: the one it runs and those queued behind it
(as far as its channel holds them whole, see runner.Worker.send). Judging a submission the class
meets first can take a grading thread ten times as long as a run takes a worker; with only the next
job waiting, the worker would then sit idle."""


class Grader:
    """Everything that is the same for every submission graded with one seed."""

    def __init__(self, seed: int, limits: Limits | None = None, key: bytes | None = None,
                 carry_forward: bool = True):
        """`key`: the grading key of the hidden cases (keys.py), by default this user's;
        `carry_forward`: a step built on a failing one keeps its credit when verified (judge.py)."""
        from solutions import attention_head as reference

        self.seed = seed
        self.carry_forward = carry_forward
        """A step whose only fault is an earlier step's verified mistake keeps its points."""
        self.limits = limits or Limits()
        self.isolation = sandbox.isolation()
        self.cases = cases_module.build(seed, key)
        self.expected, returned = {}, []
        for step in STEPS:
            raw = [[getattr(reference, call.fn)(*copy.deepcopy(call.args)) for call in case.calls]
                   for case in self.cases[step.id]]
            self.expected[step.id] = [[judge.canonical(call.fn, value) for call, value in zip(case.calls, values)]
                                      for case, values in zip(self.cases[step.id], raw)]
            returned.append([value for values in raw for value in values])
        disagreements = self.disagreements_with_chapter()
        if disagreements:
            raise RuntimeError("the reference solution disagrees with data/part-iv/attention.json: "
                               + "; ".join(disagreements))
        self.calls = [(step.id, [(call.fn, call.args) for case in self.cases[step.id] for call in case.calls])
                      for step in STEPS]
        """Per step, the (function, args) calls the hidden cases make, in step order."""
        # the chapter's example first, every step's, before the submission sees any hidden input
        public = [[case.public for case in self.cases[step.id] for _ in case.calls] for step in STEPS]
        self.plan = prepare(self.calls, returned, [{i for i, shown in enumerate(flags) if shown} for flags in public])

    def disagreements_with_chapter(self) -> list[str]:
        """Where the expected values of the chapter's example differ from attention.json.

        The hidden graders compare submissions with the reference; this ties the reference to the
        chapter's independently derived values, so the two can never drift apart unnoticed.
        """
        data = cases_module.chapter()
        tolerance = data["tolerance"]["absolute"]
        exact, values, exercises = data["exact"], data["values"], data["exercises"]
        chapter = {
            "qkv": [{"q": exact["Q"], "k": exact["K"], "v": exact["V"]}],
            "scores": [{"d": exact["D"]}], "scale": [{"s": values["S"]}], "softmax": [{"a": values["A"]}],
            "mix": [{"o": values["O"]}], "attention": [{"o": values["O"], "a": values["A"]}],
            "head": [{"o": values["O"], "a": values["A"]}],
            "ex1_zero_query": [{"weights": exercises["ex1_zero_query"]["weights"],
                                "output": exercises["ex1_zero_query"]["output"]}],
            "ex3_value_shift": [{"output": exercises["ex3_value_shift"]["whole_shift_output"]},
                                {"output": exercises["ex3_value_shift"]["row1_shift_output"]}],
        }
        found = []
        for step_id, wanted in chapter.items():
            examples = [index for index, case in enumerate(self.cases[step_id]) if case.public]
            for index, parts in zip(examples, wanted):
                got = self.expected[step_id][index][0]
                for name, value in parts.items():
                    if np.max(np.abs(got[name] - np.asarray(value, dtype=float)), initial=0.0) > tolerance:
                        found.append(f"{step_id} {name}")
        facts = exercises["ex4_shapes"]
        got = self.expected["ex4_shapes"][0][0]
        if (abs(got["divisor"] - facts["divisor"]) > tolerance or list(got["score_shape"]) != facts["score_shape"]
                or list(got["output_shape"]) != facts["output_shape"]):
            found.append("ex4_shapes")
        return found

    def grade(self, worker: Worker, submission: Submission) -> SubmissionResult:
        started = time.perf_counter()
        first = self.judge_first(submission, worker.receive(self.send(worker, submission)), started)
        if isinstance(first, Pending):
            return self.judge_again(submission, first, worker.receive(self.send(worker, submission, again=first)))
        return first

    def send(self, worker: Worker, submission: Submission, queued: bool = False, again: "Pending | None" = None):
        """Start the submission's run in the worker; `judge` turns the received run into a result.
        `queued`: behind a run not yet received (see Worker.send; None when it would not fit).
        `again`: the run calls only the steps `again` asks for, with earlier steps replaced (carry.py)."""
        # The submission's own file name: what a student sees in tracebacks and line numbers.
        name = submission.path.name if submission.path.suffix in (".py", ".ipynb") else (
            "attention_head.ipynb" if submission.notebook else "attention_head.py")
        # a notebook's cells each with its number in the notebook, which tracebacks name
        # (a cell whose body runs in a namespace of its own, `%%timeit`, says so with a third item)
        cells = ([(number, cell, True) if number in submission.apart else (number, cell)
                  for number, cell in zip(submission.numbers, submission.cells)]
                 if submission.numbers else list(submission.cells))
        return worker.send(name, cells, self.plan, self._answers(submission), queued,
                           again=None if again is None else again.asked)

    @staticmethod
    def _answers(submission: Submission) -> tuple[str, ...]:
        return () if submission.notebook else tuple(name for name, _ in ANSWERS)

    def judge(self, submission: Submission, run, started: float) -> SubmissionResult:
        """The submission's result from its run alone: no step is called again (see `judge_first`)."""
        first = self.judge_first(submission, run, started)
        return first.result() if isinstance(first, Pending) else first

    def judge_first(self, submission: Submission, run, started: float) -> "SubmissionResult | Pending":
        """The submission's result from its run; or, where a failing step built on failing steps
        may keep its credit once called again with those replaced (carry.py), what `judge_again`
        finishes once that second run is in. A failure of the judge's own is that submission's
        result too, never the end of the others' grading."""
        try:
            return self._judge(submission, run, started)
        except Exception as exc:
            return self._failed(submission, exc)

    def judge_again(self, submission: Submission, first: "Pending", again) -> SubmissionResult:
        """The result of a submission whose steps `first` asked for were called again in run `again`."""
        try:
            with np.errstate(all="ignore"):
                steps = carry.apply(first.steps, first.asked, again, self.cases, self.expected, first.run)
        except Exception as exc:
            return self._failed(submission, exc)
        return first.result(steps)

    def _failed(self, submission: Submission, exc: Exception) -> SubmissionResult:
        return unreadable(submission.name, f"{submission.name}: the grader failed while judging it "
                          f"({type(exc).__name__}); this is a fault of the grader's, not of the submission",
                          self.seed, self.isolation)

    def _judge(self, submission: Submission, run, started: float) -> "SubmissionResult | Pending":
        answers = self._answers(submission)
        run.skipped, run.discarded = dict(submission.skipped), dict(submission.discarded)
        with np.errstate(all="ignore"):
            steps = judge.grade_run(run, self.cases, self.expected, self.carry_forward)
        # None: a notebook, or never ran. The names are the grader's own, each asked for: the child's
        # answer to each is read, never a name of its making (its code can reach the frame that asks)
        written = ({name: run.answers.get(name) is True for name in answers}
                   if answers and run.imported else None)
        made = SubmissionResult(submission.name, steps, self.seed, self.isolation, answers=written,
                                output=run.import_output, seconds=time.perf_counter() - started)
        asked = carry.requests(steps, run) if self.carry_forward else []
        return Pending(made, asked, started, run) if asked else made

    def grade_path(self, worker: Worker, path: Path, name: str | None = None) -> SubmissionResult:
        try:
            submission = load(path, name)
        except SubmissionError as exc:
            return unreadable(shown_name(name or str(path)), str(exc), self.seed, self.isolation)
        return self.grade(worker, submission)

    def grade_many(self, items: Iterable[tuple[Path, str]], jobs: int | None = None,
                   progress: Callable[[SubmissionResult], None] | None = None,
                   workers: list[Worker] | None = None,
                   loader: Callable[[Path, str], Submission] = load,
                   keep: bool = True) -> list[SubmissionResult]:
        """Grade every (path, name) in parallel, one worker per job; results keep the input order.

        `workers`, when given, are started workers to use (and close): one job each. `loader`
        reads a submission (from the worker threads), raising SubmissionError for one it cannot.
        `keep=False` hands each result to `progress` alone and returns no list (every entry None),
        so that the grader's memory does not grow with the class.
        """
        items = list(items)
        started = list(workers or ())
        jobs = len(started) or max(1, min(jobs or default_jobs(), len(items) or 1))
        todo: queue.Queue = queue.Queue()
        for index, item in enumerate(items):
            todo.put((index, item))
        results: list[SubmissionResult | None] = [None] * len(items)
        done = bytearray(len(items))  # 1 where a submission has its result
        lock = threading.Lock()
        failures: list[BaseException] = []
        held: list = []  # (index, submission): loaded, and waiting for a worker with nothing to do
        held_again: list = []  # (index, submission, Pending): judged, with steps to call again
        retried: set = set()  # index, or (index, "again"): run once more after its worker was lost

        def record(index: int, result: SubmissionResult) -> None:
            done[index] = 1
            if keep:
                results[index] = result
            if progress:
                with lock:
                    progress(result)

        def next_job(worker: Worker, queued: bool):
            """Send the next submission to `worker`: (index, submission, run, started, Pending or
            None); a submission's steps to call again come before new submissions. None when there
            is none left, or when it is too large to wait behind the one running."""
            with lock:
                waiting_again = held_again.pop() if held_again else None
            if waiting_again is not None:
                index, submission, first = waiting_again
                run = self.send(worker, submission, queued, again=first)
                if run is None:  # it waits until the worker has nothing else to do
                    with lock:
                        held_again.append(waiting_again)
                    return None
                return index, submission, run, time.perf_counter(), first
            while True:
                with lock:
                    waiting = held.pop() if held else None
                if waiting is not None:
                    index, submission = waiting
                else:
                    try:
                        index, (path, name) = todo.get_nowait()
                    except queue.Empty:
                        return None
                    try:
                        submission = loader(path, name)
                    except SubmissionError as exc:
                        record(index, unreadable(name, str(exc), self.seed, self.isolation))
                        continue
                run = self.send(worker, submission, queued)
                if run is None:  # it waits until the worker has nothing else to do
                    with lock:
                        held.append((index, submission))
                    return None
                return index, submission, run, time.perf_counter(), None

        def fill(worker: Worker, flight: list) -> None:
            """IN_FLIGHT jobs in flight: the one the worker runs, and the next ones, waiting behind it."""
            while len(flight) < IN_FLIGHT:
                job = next_job(worker, queued=bool(flight))
                if job is None:
                    return
                flight.append(job)

        def serve():
            # Pipelined: the worker runs submission N+1, with N+2 and more waiting behind it, while
            # this thread judges submission N; so the worker never waits for the grader.
            try:
                with (started.pop() if started else Worker(self.limits, self.isolation)) as worker:
                    # (index, submission, run, started, Pending or None), sent and not yet received
                    flight: list = []
                    while True:
                        fill(worker, flight)
                        if not flight:
                            return
                        index, submission, run, began, first = flight.pop(0)
                        run = worker.receive(run)
                        if flight:  # the one waiting behind starts now
                            flight[0] = flight[0][:3] + (time.perf_counter(), flight[0][4])
                        if run.lost:  # the worker was ended: the job behind it never ran
                            again = [(queued[0], queued[1]) for queued in flight if queued[4] is None]
                            again_steps = [(queued[0], queued[1], queued[4]) for queued in flight
                                           if queued[4] is not None]
                            flight.clear()
                            with lock:
                                # and this one again, whatever of it came back: a worker ended
                                # (the memory killer, an administrator) is no fault of the
                                # submission's, which cannot reach it from its sealed child; so it
                                # runs once more in a new worker, from the start (once: a
                                # submission that ends it twice is judged on what came back)
                                key = index if first is None else (index, "again")
                                retry = key not in retried
                                if retry:
                                    retried.add(key)
                                    if first is None:
                                        again.insert(0, (index, submission))
                                    else:
                                        again_steps.insert(0, (index, submission, first))
                                held.extend(reversed(again))  # taken from the end: in order
                                held_again.extend(reversed(again_steps))
                            if retry:
                                continue
                        fill(worker, flight)  # the next job runs while this one is judged
                        if first is not None:  # its steps called again: its result is final now
                            record(index, self.judge_again(submission, first, run))
                            continue
                        judged = self.judge_first(submission, run, began)
                        if isinstance(judged, Pending):
                            with lock:
                                held_again.append((index, submission, judged))
                            fill(worker, flight)
                        else:
                            record(index, judged)
            except BaseException as exc:  # surfaced below; never lose the other workers' results
                failures.append(exc)

        threads = [threading.Thread(target=serve, daemon=True) for _ in range(jobs)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures and not all(done):
            raise failures[0]
        return results  # type: ignore[return-value]


class Pending:
    """A submission judged on its run, with steps to call again before its result is final."""

    def __init__(self, made: SubmissionResult, asked: list[tuple[int, list[str]]], started: float, run=None):
        self.made, self.asked, self.started = made, asked, started
        self.run = run
        """The submission's own run, until its steps called again are in."""
        self.steps = made.steps

    def result(self, steps: list | None = None) -> SubmissionResult:
        """The result with `steps` (by default, as judged on the first run alone)."""
        return dataclasses.replace(self.made, steps=list(steps if steps is not None else self.steps),
                                   seconds=time.perf_counter() - self.started)
