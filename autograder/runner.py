"""The isolated runner: sends a submission and its planned calls to a worker, collects plain data.

A `Worker` is one long-lived sandboxed process with numpy already imported (see `child.py` and
`sandbox.py`); it forks a fresh child per submission, so starting a submission costs a fork, not
an interpreter. The judge never runs submission code itself; it only reads what comes back here.
"""
from __future__ import annotations

import fcntl
import json
import secrets
import os
import select
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from . import child, sandbox


F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


@dataclass(frozen=True)
class Limits:
    import_timeout: float = 10.0
    """Seconds the submission's module (or notebook cells) may take to run."""
    call_timeout: float = 1.0
    """Seconds one call of a student function may take."""
    memory: int = 2 * 1024**3
    """Address-space cap of the submission's process, in bytes."""
    output: int = 2000
    """Characters of printed output kept per call; the rest is counted, not stored."""


@dataclass
class Outcome:
    """What one call of a student function came to."""

    value: Any = None
    raised: dict | None = None
    """The exception it raised: type, message and the line of the submission it came from."""
    fault: str | None = None
    """timeout, exit, crashed or memory: the call never returned."""
    detail: str | None = None
    mutated: list[int] = field(default_factory=list)
    output: str = ""


@dataclass
class Run:
    """Everything one submission's run produced, indexed like the plan."""

    outcomes: list[list[Outcome | None]]
    imported: bool = False
    import_error: dict | None = None
    import_fault: str | None = None
    import_output: str = ""
    answers: dict[str, bool] = field(default_factory=dict)
    """For each requested module-level answer name: present and non-empty."""
    lost: str | None = None
    """Set when the worker itself failed: the calls without outcomes could not be run."""
    most_calls: int = 1


@dataclass(frozen=True)
class Prepared:
    """A plan encoded once, to be sent to many submissions."""

    plan_json: bytes
    blob: bytes
    counts: tuple[int, ...]
    id: str = field(default_factory=lambda: secrets.token_hex(8))


def prepare(plan: list[tuple[str, list[tuple[str, tuple]]]]) -> Prepared:
    job_plan, blobs, offset = [], [], 0
    for step_id, calls in plan:
        encoded_calls = []
        for name, args in calls:
            parts: list[bytes] = []
            encoded = child.encode(list(args), parts, [0, 0])
            encoded_calls.append({"fn": name, "args": encoded, "offset": offset})
            blobs.extend(parts)
            offset += sum(len(part) for part in parts)
        job_plan.append({"step": step_id, "calls": encoded_calls})
    return Prepared(json.dumps(job_plan, separators=(",", ":")).encode(), b"".join(blobs),
                    tuple(len(calls) for _, calls in plan))


class WorkerFailed(RuntimeError):
    pass


class Worker:
    """One sandboxed worker process; restarts itself when it dies."""

    def __init__(self, limits: Limits | None = None):
        self.limits = limits or Limits()
        self._process: subprocess.Popen | None = None
        self._ready = False
        self._plan_id: str | None = None

    # -- process management -------------------------------------------------------------------

    def start(self) -> None:
        self._process = subprocess.Popen(
            sandbox.worker_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=sandbox.worker_env(), close_fds=True)
        try:  # room for a whole submission's results while the grader is busy judging the last one
            fcntl.fcntl(self._process.stdout.fileno(), F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass
        self._ready = False  # checked on first use, so the caller can work while the worker loads
        self._plan_id = None

    def _wait_ready(self) -> None:
        _, ready = self._read(60.0)
        if ready.get("ev") != "ready":
            self.close()
            raise WorkerFailed("the grading worker did not start")
        self._ready = True

    def close(self) -> None:
        if self._process is not None:
            try:
                self._process.kill()
            except OSError:
                pass
            self._process.wait()
            for stream in (self._process.stdin, self._process.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            self._process = None

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _read(self, timeout: float) -> tuple[bytes, dict]:
        fd = self._process.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            raise WorkerFailed("the grading worker stopped answering")
        try:
            _, obj, blob = child.read_frame(fd)
        except (EOFError, ValueError, OSError) as exc:
            raise WorkerFailed("the grading worker died") from exc
        return blob, obj

    # -- one submission ---------------------------------------------------------------------

    def run(self, filename: str, cells: list[str], plan: "Prepared | list", answers: tuple[str, ...] = ()) -> Run:
        """Run `plan` (per step: a list of (function name, args)) against the submission's cells."""
        return self.receive(self.send(filename, cells, plan, answers))

    def send(self, filename: str, cells: list[str], plan: "Prepared | list", answers: tuple[str, ...] = ()) -> Run:
        """Start a submission's run; `receive` collects it. The worker runs one job at a time."""
        if self._process is None or self._process.poll() is not None:
            self.close()
            self.start()
        if not self._ready:
            self._wait_ready()
        prepared = plan if isinstance(plan, Prepared) else prepare(plan)
        limits = self.limits
        head = json.dumps({"filename": filename, "cells": cells, "answers": list(answers),
                           "plan_id": prepared.id,
                           "limits": {"import_timeout": limits.import_timeout, "call_timeout": limits.call_timeout,
                                      "memory": limits.memory, "output": limits.output}}, separators=(",", ":"))
        if self._plan_id == prepared.id:  # the worker keeps the plan it was last sent, decoded
            body, blob = head.encode(), b""
        else:
            body, blob = head[:-1].encode() + b',"plan":' + prepared.plan_json + b"}", prepared.blob
            self._plan_id = prepared.id
        run = Run(outcomes=[[None] * count for count in prepared.counts])
        run.most_calls = max(prepared.counts, default=1)
        try:
            child.write_raw_frame(self._process.stdin.fileno(), body, blob)
        except OSError:
            run.lost = "the grading worker died"
            self.close()
        return run

    def receive(self, run: Run) -> Run:
        if run.lost:
            return run
        try:
            self._collect(run, run.most_calls)
        except (WorkerFailed, OSError) as exc:
            run.lost = str(exc) if isinstance(exc, WorkerFailed) else "the grading worker died"
            self.close()
        return run

    @staticmethod
    def _valid(run: Run, step, call) -> bool:
        return (isinstance(step, int) and isinstance(call, int)
                and 0 <= step < len(run.outcomes) and 0 <= call < len(run.outcomes[step]))

    def _collect(self, run: Run, most_calls: int) -> None:
        limits = self.limits
        # The worker enforces the real limits; this is only a watchdog over the worker itself.
        patience = max(limits.import_timeout, limits.call_timeout * most_calls) + 15.0
        started = time.monotonic()
        while True:
            blob, obj = self._read(patience)
            event = obj.get("ev")
            if event == "done":
                return
            if event == "imported":
                if not run.imported and run.import_error is None:
                    run.imported = bool(obj.get("ok"))
                    run.import_error = obj.get("error")
                    run.import_output = str(obj.get("out", ""))
                    answers = obj.get("answers")
                    if isinstance(answers, dict):
                        run.answers = {str(k): v is True for k, v in answers.items()}
                continue
            if event == "fault":
                step, call = obj.get("step"), obj.get("call")
                if step is None:
                    run.import_fault = str(obj.get("kind"))
                elif self._valid(run, step, call):
                    run.outcomes[step][call] = Outcome(fault=str(obj.get("kind")), detail=obj.get("detail"),
                                                       output=str(obj.get("out", "")))
                continue
            if event != "step" or not isinstance(obj.get("results"), list):
                continue
            step, offset = obj.get("step"), [0]
            for result in obj["results"]:
                call = result.get("call") if isinstance(result, dict) else None
                if not self._valid(run, step, call):
                    break  # nothing after a malformed entry can be placed with certainty
                value = _decode_safely(result["value"], blob, offset) if "value" in result else None
                mutated = [i for i in result.get("mutated", []) if isinstance(i, int)]
                raised = result.get("raised")
                run.outcomes[step][call] = Outcome(
                    value=value, raised=raised if isinstance(raised, dict) else None,
                    mutated=mutated, output=str(result.get("out", "")))
            if time.monotonic() - started > 3600:
                raise WorkerFailed("the submission ran for more than an hour")


def _decode_safely(obj, blob: bytes, offset: list[int]):
    """Decode a returned value; a malformed description (only a tampered child sends one) is Bad."""
    try:
        return child.decode(obj, blob, offset)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
        return child.Bad("a value the grader could not read")


def default_jobs() -> int:
    """One worker per core, plus one: a worker spends part of each submission waiting on the grader."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores) + 1
