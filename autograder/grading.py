"""Grading one submission or many: cases and expected values once per seed, runs in parallel.

The reference solution runs here, in the grader's process, on the hidden cases; submissions run
only in workers. One worker per core serves a queue of submissions; a submission that breaks its
worker costs only its own remaining steps, and the worker is restarted for the next one.
"""
from __future__ import annotations

import copy
import queue
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from . import cases as cases_module
from . import judge, sandbox
from .results import SubmissionResult, unreadable
from .runner import Limits, Worker, default_jobs, prepare
from .steps import ANSWERS, STEPS
from .submission import Submission, SubmissionError, load, shown_name


class Grader:
    """Everything that is the same for every submission graded with one seed."""

    def __init__(self, seed: int, limits: Limits | None = None):
        from solutions import attention_head as reference

        self.seed = seed
        self.limits = limits or Limits()
        self.isolation = sandbox.isolation()
        self.cases = cases_module.build(seed)
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
        self.plan = prepare(self.calls, returned)

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
        return self.judge(submission, worker.receive(self.send(worker, submission)), started)

    def send(self, worker: Worker, submission: Submission):
        """Start the submission's run in the worker; `judge` turns the received run into a result."""
        # The submission's own file name: what a student sees in tracebacks and line numbers.
        name = submission.path.name if submission.path.suffix in (".py", ".ipynb") else (
            "attention_head.ipynb" if submission.notebook else "attention_head.py")
        return worker.send(name, list(submission.cells), self.plan, self._answers(submission))

    @staticmethod
    def _answers(submission: Submission) -> tuple[str, ...]:
        return () if submission.notebook else tuple(name for name, _ in ANSWERS)

    def judge(self, submission: Submission, run, started: float) -> SubmissionResult:
        answers = self._answers(submission)
        with np.errstate(all="ignore"):
            steps = judge.grade_run(run, self.cases, self.expected)
        written = run.answers if answers and run.imported else None  # None: a notebook, or never ran
        return SubmissionResult(submission.name, steps, self.seed, self.isolation, answers=written,
                                output=run.import_output, seconds=time.perf_counter() - started)

    def grade_path(self, worker: Worker, path: Path, name: str | None = None) -> SubmissionResult:
        try:
            submission = load(path, name)
        except SubmissionError as exc:
            return unreadable(shown_name(name or str(path)), str(exc), self.seed, self.isolation)
        return self.grade(worker, submission)

    def grade_many(self, items: Iterable[tuple[Path, str]], jobs: int | None = None,
                   progress: Callable[[SubmissionResult], None] | None = None,
                   workers: list[Worker] | None = None) -> list[SubmissionResult]:
        """Grade every (path, name) in parallel, one worker per job; results keep the input order.

        `workers`, when given, are started workers to use (and close): one job each.
        """
        items = list(items)
        started = list(workers or ())
        jobs = len(started) or max(1, min(jobs or default_jobs(), len(items) or 1))
        todo: queue.Queue = queue.Queue()
        for index, item in enumerate(items):
            todo.put((index, item))
        results: list[SubmissionResult | None] = [None] * len(items)
        lock = threading.Lock()
        failures: list[BaseException] = []

        def record(index: int, result: SubmissionResult) -> None:
            results[index] = result
            if progress:
                with lock:
                    progress(result)

        def serve():
            # Pipelined: the worker runs submission N+1 while this thread judges submission N.
            try:
                with (started.pop() if started else Worker(self.limits, self.isolation)) as worker:
                    received = None  # (index, submission, run, started), not judged yet
                    while True:
                        try:
                            index, (path, name) = todo.get_nowait()
                        except queue.Empty:
                            index = None
                        sent = None
                        if index is not None:
                            try:
                                submission = load(path, name)
                            except SubmissionError as exc:
                                record(index, unreadable(name, str(exc), self.seed, self.isolation))
                            else:
                                sent = (index, submission, self.send(worker, submission), time.perf_counter())
                        if received is not None:
                            record(received[0], self.judge(*received[1:]))
                            received = None
                        if sent is not None:
                            received = (sent[0], sent[1], worker.receive(sent[2]), sent[3])
                        elif index is None:
                            return
            except BaseException as exc:  # surfaced below; never lose the other workers' results
                failures.append(exc)

        threads = [threading.Thread(target=serve, daemon=True) for _ in range(jobs)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if failures and any(result is None for result in results):
            raise failures[0]
        return results  # type: ignore[return-value]
