"""The isolated runner: sends a submission and its planned calls to a worker, collects plain data.

A `Worker` is one long-lived sandboxed process with numpy already imported (see `inside.py` and
`sandbox.py`); it forks a fresh, sealed child per submission, so starting a submission costs a
fork, not an interpreter. The judge never runs submission code itself; it only reads what comes
back here, through `protocol.py`'s bounded reader: a worker that sends anything unexpected, too
large or too late loses that submission's remaining calls, never the grader's run.
"""
from __future__ import annotations

import fcntl
import itertools
import json
import marshal
import os
import secrets
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import protocol, sandbox


F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)
JOBS_PIPE = 256 << 10
"""Bytes asked for the channel to a worker: the jobs queued there never take more than it holds."""


BUDGET_CALLS = 20

STARTING_GRACE = 2.0
"""Seconds a worker closed while still starting is given to end on its own, removing its scratch folder."""


_CHAPTER_FUNCTIONS: dict[str, str] = {}


def chapter_functions() -> dict[str, str]:
    """Each of the chapter's functions (chapter_head.py), its source alone: what stands in for a
    failing earlier step when a later step is called again. Only the grader reads the file; a job
    that calls steps again carries those it names (a child that could reach the whole head would
    hand it in as its own)."""
    if not _CHAPTER_FUNCTIONS:
        text = Path(__file__).with_name("chapter_head.py").read_text(encoding="utf-8")
        _CHAPTER_FUNCTIONS.update({part.split("(", 1)[0]: "def " + part.split("\n\n\n", 1)[0] + "\n"
                                   for part in text.split("\ndef ")[1:]})
    return _CHAPTER_FUNCTIONS


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

    @property
    def budget(self) -> float:
        """Seconds one run (a submission's calls, or the steps it has called again) may take in
        all: the import's limit and twenty calls' limits. Each call alone may take up to its own
        limit; a submission whose calls, one after another, each take nearly that long would
        otherwise hold a worker for minutes. Past it, the steps not yet run are not run."""
        return self.import_timeout + BUDGET_CALLS * self.call_timeout


@dataclass
class Outcome:
    """What one call of a student function came to."""

    value: Any = None
    raised: dict | None = None
    """The exception it raised: type, message and the line of the submission it came from."""
    fault: str | None = None
    """timeout, exit, crashed, memory, disk or protocol: the call never returned."""
    detail: str | None = None
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
    stopped: list[dict] = field(default_factory=list)
    """The notebook cells that stopped with an error (at most protocol.MAX_STOPPED), each as `raised`."""
    outside: dict[str, list[str]] = field(default_factory=dict)
    """Per graded function, the names of values defined outside it that it reads (a notebook's `X`)."""
    bound: dict[str, list[int]] = field(default_factory=dict)
    """Per graded function a notebook binds in two cells or more, those cells' numbers, in order."""
    defaults: dict[str, list[str]] = field(default_factory=dict)
    """Per graded function, the names of its parameters that have defaults."""
    unset: dict[str, list[str]] = field(default_factory=dict)
    """Per graded function, its parameters whose default is None and that its own code assigns."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Set by the grader from the notebook itself: names defined only in cells it does not run."""
    discarded: dict[str, int] = field(default_factory=dict)
    """Set likewise: names defined in `%%timeit` cells, whose bindings are gone once the cell ends."""
    lost: str | None = None
    """Set when the worker itself failed: the calls without outcomes could not be run."""
    imports: int = 1
    """How many times the submission is imported in the run: once, or once per step called again."""
    most_calls: int = 1
    """How many calls the plan makes in all: the worker's watchdog allows time for each."""
    job: int = 0
    """The id the worker tags this run's frames with."""
    exact: dict = field(default_factory=dict)
    """The plan's `Prepared.exact`: result frames that need no reading."""
    generation: int = 0
    """Which start of its worker it was sent to (`Worker._generation`)."""
    order: tuple = ()
    """While the run is collected: the plan's `Prepared.order`, by which `receive` puts it back."""
    sizes: tuple = ()
    """While the run is collected: the plan's `Prepared.sizes`."""
    reimport: str | None = None
    """How importing the module again failed, in a fresh process after a call that did not finish:
    the steps after that point were never run."""
    sent: int = 0
    """Bytes of the job as written to the worker's channel (see `Worker.send`)."""
    provisional: dict = field(default_factory=dict)
    """Set by the judge: step id -> its grade on its own cases, for a step whose carried credit
    rests on exceptions alone until it is called again (judge.grade_step, carry.py)."""


EXACT = object()
"""An Outcome's value when the call returned, byte for byte, what the reference returns."""


@dataclass(frozen=True)
class Prepared:
    """A plan encoded once, to be sent to many submissions: each call as a ready frame."""

    plan_json: bytes
    """Per step, the (offset, length) of each call's frame in `blob`: no argument values."""
    blob: bytes
    """Every call's frame, one after another: its step, call, function name and arguments."""
    counts: tuple[int, ...]
    id: str = field(default_factory=lambda: secrets.token_hex(8))
    exact: dict = field(default_factory=dict)
    """The result frame of each call (step, call) that returns exactly the reference's value,
    printing nothing, as a submission's process writes it. Kept here, never sent to a worker."""
    order: tuple = ()
    """Per step as the worker runs it, (the plan's step, [the plan's call of each of its calls]);
    empty when the worker runs the plan as it is."""
    sizes: tuple[int, ...] = ()
    """Per step of the plan, its number of calls (`counts` are per step as the worker runs it)."""
    public: int = 0
    """How many of the steps as the worker runs them are the public calls' parts: the worker
    never hands a submission's process a call past them before they have all answered."""


def prepare(plan: list[tuple[str, list[tuple[str, tuple]]]], returned: list[list] | None = None,
            public: list[set[int]] | None = None) -> Prepared:
    """Encode `plan`; `returned`, per step and call, is what the reference returns for each call.

    `public`, per step, the calls whose messages feedback may show (the chapter's example). They all
    run first, every step's, before any other call: a submission's process lives on from step to
    step, and what it saw of a hidden input could otherwise come back in a later step's public
    message. The worker then runs each step in two parts; `Worker.receive` puts the outcomes back in
    the plan's order."""
    order, public_runs = [], 0
    if public is not None:
        for part in (True, False):
            for step_index, (_step_id, calls) in enumerate(plan):
                picked = [c for c in range(len(calls)) if (c in public[step_index]) == part]
                if picked:
                    order.append((step_index, picked))
            if part:
                public_runs = len(order)  # the public parts come first
    runs = order or [(step_index, list(range(len(calls)))) for step_index, (_, calls) in enumerate(plan)]
    exact = {}
    steps, frames, offset = [], [], 0
    for run_index, (step_index, picked) in enumerate(runs):
        calls = plan[step_index][1]
        values = returned[step_index] if returned else None
        places = []
        for run_call, call_index in enumerate(picked):
            name, args = calls[call_index]
            frame = protocol.call_frame(run_index, run_call, name, args)
            places.append([offset, len(frame)])
            frames.append(frame)
            offset += len(frame)
            if values is not None:
                exact[protocol.result_frame(run_index, run_call, values[call_index])] = (run_index, run_call)
        steps.append(places)
    return Prepared(json.dumps(steps, separators=(",", ":")).encode(), b"".join(frames),
                    tuple(len(picked) for _, picked in runs), exact=exact,
                    order=tuple((step_index, tuple(picked)) for step_index, picked in order),
                    sizes=tuple(len(calls) for _, calls in plan), public=public_runs)


class WorkerFailed(RuntimeError):
    pass


_jobs = itertools.count(1)


class Worker:
    """One sandboxed worker process; restarts itself when it dies."""

    def __init__(self, limits: Limits | None = None, mode: str | None = None):
        self.limits = limits or Limits()
        self.mode = mode or sandbox.choose()
        self._process: subprocess.Popen | None = None
        self._reader: protocol.Reader | None = None
        self._ready = False
        self._plan_id: str | None = None
        self._scratch: str | None = None
        self._to: int | None = None
        self._room = 0
        """Bytes the channel to the worker holds: the jobs queued behind another must fit in it."""
        self._unreceived = 0
        """Bytes of the jobs sent to the worker and not yet received: at most that much is unread in
        its channel, since the worker reads a job whole before it runs it."""
        self._generation = 0
        """How many times the worker has been started: a run belongs to the process it was sent to."""
        self._lock = threading.Lock()

    # -- process management -------------------------------------------------------------------

    def start(self) -> None:
        # The two channels are descriptors of their own, above the standard three, never the
        # worker's standard input and output: bubblewrap's init (pid 1 of the sandbox, which may
        # run as the grader's user) closes all but those three, so only the worker holds them.
        jobs_in, jobs_out = os.pipe()
        try:
            results_in, results_out = os.pipe()
        except BaseException:
            os.close(jobs_in)
            os.close(jobs_out)
            raise
        try:
            for fd, size in ((results_in, 1 << 20), (jobs_out, JOBS_PIPE)):
                try:  # room for a whole submission's results while the grader is busy judging the
                    fcntl.fcntl(fd, F_SETPIPE_SZ, size)  # last one, and for the next job, queued
                except OSError:
                    pass
            argv, env = sandbox.worker_command(self.mode, (jobs_in, results_out))
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL, env=env, close_fds=True,
                                       pass_fds=(jobs_in, results_out))
        except BaseException:
            for fd in (jobs_out, results_in):
                os.close(fd)
            raise
        finally:
            for fd in (jobs_in, results_out):
                os.close(fd)
        with self._lock:
            self._process, self._to, self._generation = process, jobs_out, self._generation + 1
            self._reader = protocol.Reader(results_in, max_blob=protocol.MAX_VALUE_BYTES)
        self._room = fcntl.fcntl(jobs_out, F_GETPIPE_SZ)
        self._unreceived = 0
        self._ready = False  # checked on first use, so the caller can work while the worker loads
        self._plan_id = None

    def channels(self) -> tuple[int, int]:
        """The grader's ends of the two channels: jobs to the worker, results from it."""
        return self._to, self._reader.fd

    def _wait_ready(self) -> None:
        try:
            ready, _ = self._reader.read(time.monotonic() + 60.0)
        except protocol.ProtocolError:
            ready = {}
        if ready.get("ev") != "ready":
            self.close()
            raise WorkerFailed(f"the grading worker did not start (sandbox mode {self.mode})")
        problem = self._seal_problem(ready)
        if problem:
            self.close()
            raise sandbox.SandboxUnavailable(f"sandbox mode {self.mode} cannot seal submissions here: {problem}")
        if isinstance(ready.get("scratch"), str) and self.mode in ("landlock", "none"):
            self._scratch = ready["scratch"]
        self._ready = True

    def _seal_problem(self, ready: dict) -> str | None:
        mode = sandbox.MODES[self.mode]
        if mode.seal == "none":
            return None
        if ready.get("seccomp") is not True:
            return "seccomp is missing"
        if mode.landlock_required and not ready.get("landlock"):
            return ready.get("problem") or "Landlock is missing"
        if ready.get("sealed") is not True:
            return "a process could not seal itself"
        return None

    def close(self) -> None:
        """End the worker. Safe to call twice, and from two threads at once (an interrupted run
        closes its workers while the threads grading with them may be closing them too): each
        descriptor is closed once, by the one call that took it."""
        with self._lock:
            process, self._process = self._process, None
            reader, self._reader = self._reader, None
            to, self._to = self._to, None
            scratch, self._scratch = self._scratch, None
            starting = not self._ready
        if process is not None and starting and to is not None:
            # Still loading, its scratch folder not yet named to the grader: its channel closed, it
            # ends on its own at its first read and removes that folder (a run that ends before a
            # worker is used, on an unreadable file say, left it behind when killed outright).
            os.close(to)
            to = None
            try:
                process.wait(timeout=STARTING_GRACE)
            except subprocess.TimeoutExpired:
                pass
        if process is not None:
            try:
                process.kill()
            except OSError:
                pass
            process.wait()
        for fd in (to, reader.fd if reader is not None else None):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        if scratch:  # the worker's scratch folders, where it could not remove them itself
            from .inside import remove_tree

            remove_tree(scratch)

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- one submission ---------------------------------------------------------------------

    def run(self, filename: str, cells: list[str], plan: "Prepared | list", answers: tuple[str, ...] = ()) -> Run:
        """Run `plan` (per step: a list of (function name, args)) against the submission's cells."""
        return self.receive(self.send(filename, cells, plan, answers))

    def send(self, filename: str, cells: list[str], plan: "Prepared | list", answers: tuple[str, ...] = (),
             queued: bool = False, again: list[tuple[int, list[str]]] | None = None) -> Run | None:
        """Start a submission's run; `receive` collects it. The worker runs one job at a time, and
        reads the next when it is done with one.

        `again`: call only these steps (by their index in the plan), each in a fresh child, with
        the named functions replaced by the chapter's computation (see inside.py); the run's
        outcomes of every other step stay None.

        `queued`: another job is running, and this one waits behind it (and behind any others
        queued). It is sent only if it fits whole in the channel beside every job not yet received
        (None otherwise: send it once they are), so the grader never waits on a worker that may
        itself be waiting for the grader to read."""
        prepared = plan if isinstance(plan, Prepared) else prepare(plan)
        if self._process is None or self._process.poll() is not None or (
                self._plan_id is not None and self._plan_id != prepared.id):
            if queued:
                return None
            self.close()  # a worker grades one plan: a new plan gets a new worker
            self.start()
        if not self._ready:
            self._wait_ready()
        limits = self.limits
        frames = []
        if self._plan_id != prepared.id:  # the worker keeps the plan it was last sent, decoded
            frames.append(protocol.pack_raw(b'{"plan_id":"%s","public":%d,"steps":' % (prepared.id.encode(), prepared.public)
                                            + prepared.plan_json + b"}", prepared.blob))
        job = next(_jobs)
        head = {"job": job, "filename": filename, "answers": list(answers), "plan_id": prepared.id,
                "limits": {"import_timeout": limits.import_timeout, "call_timeout": limits.call_timeout,
                           "budget": limits.budget,
                           "memory": limits.memory, "output": limits.output}}
        if again is not None:  # a step of the plan: both its parts, in one child
            head["again"] = [[_parts_of(prepared, index), list(names)] for index, names in again]
            # the chapter's functions those names stand for, from the grader: the head is never in a
            # worker's view, where a child without Landlock could read it
            head["stand_ins"] = {name: source for name, source in chapter_functions().items()
                                 if any(name in names for _, names in again)}
        # The cells in marshal's format: read by the submission's own process only, and decoded
        # there without running any of the JSON module's Python code (cheaper in a fresh fork).
        frames.append(protocol.pack(head, marshal.dumps(cells)))
        size = sum(len(frame) for frame in frames)
        if queued and self._unreceived + size > self._room:
            return None
        self._plan_id = prepared.id
        run = Run(outcomes=[[None] * count for count in prepared.counts])
        run.most_calls = sum(prepared.counts)
        run.order = prepared.order
        run.sizes = prepared.sizes
        if again is not None:
            run.imports = max(1, len(again))
            run.most_calls = sum(prepared.counts[part] for index, _ in again for part in _parts_of(prepared, index))
        run.job = job
        run.exact = prepared.exact
        run.generation = self._generation
        run.sent, self._unreceived = size, self._unreceived + size
        try:
            protocol.write_all(self._to, b"".join(frames))
        except OSError:
            run.lost = "the grading worker died"
            self.close()
        return run

    def receive(self, run: Run) -> Run:
        """The run's outcomes once it is done, indexed like the plan."""
        try:
            self._receive(run)
        finally:
            if run.generation == self._generation:  # read whole by the worker: its bytes are gone
                self._unreceived = max(0, self._unreceived - run.sent)
            _in_plan_order(run)
        return run

    def _receive(self, run: Run) -> None:
        if run.lost:
            return
        if self._process is None or run.generation != self._generation:
            run.lost = "the grading worker died"  # before this run was read: never read another's
            return
        try:
            self._collect(run)
        except protocol.ProtocolError as exc:
            run.lost = f"the grading worker failed ({protocol.reason(exc)})"
            self.close()
        except OSError:
            run.lost = "the grading worker died"
            self.close()

    def _collect(self, run: Run) -> None:
        limits = self.limits
        # The worker keeps each call's time; this is only a watchdog over the worker itself. A call
        # that does not finish ends its process, and a fresh one imports the module again: at most
        # one import more per part of the plan (every step's example, then every step's hidden cases).
        deadline = (time.monotonic() + (run.imports + len(run.outcomes)) * limits.import_timeout
                    + run.most_calls * (limits.call_timeout + 1.0) + 15.0)
        used, reader = 0, self._reader  # its own reference: another thread may close the worker
        described = 0  # bytes of JSON text of the run's results so far (RUN_TEXT)
        if reader is None:
            raise protocol.Closed("the worker was ended")
        while True:
            raw = reader.read_raw(deadline)
            known = run.exact.get(raw)
            if known is not None:  # the reference's own value, byte for byte: nothing to check or decode
                _record(run, *known, Outcome(value=EXACT))
                continue
            text, blob = protocol.split(raw)
            described += len(text) if len(text) <= RESULT_TEXT else 0
            if len(text) > RESULT_TEXT or described > RUN_TEXT:
                where = _result_of(run, text)
                if where is not None:  # refused unread: reading it is what would cost
                    _record(run, *where, Outcome(value=protocol.Bad(
                        "an object too large to read (over %d KiB described)" % (RESULT_TEXT >> 10)
                        if len(text) > RESULT_TEXT else
                        "an object past what one submission may describe in all (%d MiB)" % (RUN_TEXT >> 20))))
                    continue
                if protocol.result_place(text) is not None:  # a second result for one call: forged
                    raise protocol.ProtocolError("a result for a call already answered")
            try:
                used = self._read_frame(run, raw, text, blob, used)
            except protocol.ProtocolError as exc:
                # A result the worker passed on by its first bytes is the submission's own: what
                # the grader refuses in it is that call's fault, and the run goes on.
                where = _result_of(run, text)
                if where is None:
                    raise
                _record(run, *where, Outcome(fault="protocol", detail=protocol.reason(exc)))
            if used is None:
                return

    def _read_frame(self, run: Run, raw: bytes, text: bytes, blob: bytes, used: int) -> int | None:
        """Take in one frame of the run; returns the array bytes used so far, or None at its end."""
        seen = _CHECKED.get(text)
        if seen is not None and seen[3] == len(blob) and used + len(blob) <= protocol.MAX_JOB_BYTES \
                and seen[0] < len(run.outcomes) and seen[1] < len(run.outcomes[seen[0]]):
            # A result whose very JSON text was checked before: only its bytes are new.
            used += len(blob)
            _record(run, seen[0], seen[1], Outcome(value=_decode(seen[2], blob)))
            return used
        obj, blob = protocol.Reader.parse(raw)
        event = obj.get("ev")
        if event != "result" and obj.get("job") != run.job:  # results come only between the two
            raise protocol.ProtocolError("a frame for another submission")
        if event == "done":
            return None
        if event == "imported":
            if run.imported and obj.get("ok") is not True:  # imported again, in a fresh process, and failed
                run.reimport = "it raised an exception"
            if not run.imported and run.import_error is None:
                run.imported = obj.get("ok") is True
                run.import_error = protocol.raised(obj["error"]) if "error" in obj else None
                run.import_output = protocol.text(obj, "out", optional=True) or ""
                if run.imported:
                    run.answers = dict(protocol.answers(obj.get("answers", {})))
                    run.stopped = protocol.stopped(obj.get("stopped", []))
                    run.outside = protocol.outside(obj.get("outside", {}))
                    run.bound = protocol.bound(obj.get("bound", {}))
                    run.defaults = protocol.outside(obj.get("defaults", {}))
                    run.unset = protocol.outside(obj.get("unset", {}))
            return used
        step = protocol.index(obj, "step", optional=True)
        call = protocol.index(obj, "call", optional=True)
        if step is not None and not (step < len(run.outcomes) and call is not None
                                     and call < len(run.outcomes[step])):
            raise protocol.ProtocolError("a result for a call that was not planned")
        output = protocol.text(obj, "out", optional=True) or ""
        if event == "fault":
            kind = obj.get("kind")
            if kind not in ("timeout", "budget", "exit", "memory", "crashed", "protocol", "disk"):
                raise protocol.ProtocolError("a fault of unknown kind")
            if step is None:
                if run.imported:  # imported again, in a fresh process after a fault, and never finished
                    run.reimport = {"timeout": "it ran past the time limit", "exit": "it called exit",
                                    "memory": "it ran out of memory"}.get(kind, f"its process died ({kind})")
                run.import_fault = kind
            else:
                _record(run, step, call, Outcome(fault=kind, detail=protocol.text(obj, "detail", True),
                                                 output=output))
            return used
        if event != "result" or step is None:
            raise protocol.ProtocolError("a frame of unknown kind")
        protocol.only(obj, "ev", "step", "call", "value", "raised", "out")
        used = protocol.result_body(obj, blob, used)
        if "raised" in obj:
            _record(run, step, call, Outcome(raised=protocol.raised(obj["raised"]), output=output))
            return used
        value = _decode(obj["value"], blob)
        if not output and len(text) <= CHECKED_TEXT and len(_CHECKED) < CHECKED_COUNT:
            _CHECKED[text] = (step, call, obj["value"], len(blob))
        _record(run, step, call, Outcome(value=value, output=output))
        return used


RESULT_TEXT = 64 << 10
"""Bytes of JSON text one result may take (its value's description and its printed output), read
or not: a [16, 16] matrix as nested lists takes 7 KiB. A value of twenty thousand parts, allowed by
the child's own limit (protocol.MAX_PARTS), takes far more, and would cost the grader milliseconds
to parse and check, again for every call."""
RUN_TEXT = 2 << 20
"""Bytes of JSON text all of one run's results may take: past it, each result is refused unread.
A hundred calls returning nested lists take under 1 MiB; without a bound in all, a submission
returning the largest description on every call would cost the grader seconds, and its memory."""

CHECKED_TEXT, CHECKED_COUNT = 600, 4096
_CHECKED: dict[bytes, tuple] = {}
"""The JSON text of result frames already read and checked in full, each with what it says: (step,
call, value description, bytes of array data it describes). Classmates' results
for one call mostly differ only in their array bytes, so most results need no reading again:
their text is the same, byte for byte, as one checked before. Bounded in size and in number, and
only for results that printed nothing (printed output seldom repeats: it would fill the table)."""


def _result_of(run: Run, text: bytes) -> tuple[int, int] | None:
    """(step, call) of a result frame by its first bytes, the very bytes the worker checked before
    passing it on, when that planned call has no outcome yet; otherwise None."""
    place = protocol.result_place(text)
    if place is None:
        return None
    step, call = place
    if step < len(run.outcomes) and call < len(run.outcomes[step]) and run.outcomes[step][call] is None:
        return step, call
    return None


def _decode(described: dict, blob: bytes):
    try:
        return protocol.decode(described, blob)
    except (ValueError, TypeError, MemoryError):
        raise protocol.ProtocolError("an array numpy cannot build")


def _parts_of(prepared: Prepared, index: int) -> list[int]:
    """The steps the worker runs for the plan's step `index`: the step itself, or its two parts."""
    if not prepared.order:
        return [index]
    return [part for part, (step_index, _) in enumerate(prepared.order) if step_index == index]


def _in_plan_order(run: Run) -> None:
    """Put a run's outcomes, received per step as the worker ran them, in the plan's order (once)."""
    if not run.order:
        return
    # A part of which nothing came back, once the module had been imported, never ran: the run was
    # lost, or importing the module again in a fresh process failed. Its calls say which. (A part cut
    # short by a call that did not finish keeps its other calls None: skipped after that call.)
    reason = run.lost or (f"importing your module again, in a fresh process after a call that did not finish, "
                          f"failed: {run.reimport}" if run.reimport else None)
    outcomes = [[None] * size for size in run.sizes]
    for part, (step_index, picked) in enumerate(run.order):
        never = reason is not None and run.imported and all(outcome is None for outcome in run.outcomes[part])
        for run_call, call_index in enumerate(picked):
            outcomes[step_index][call_index] = (Outcome(fault="lost", detail=reason) if never
                                                else run.outcomes[part][run_call])
    run.outcomes, run.order = outcomes, ()


def _record(run: Run, step: int, call: int, outcome: Outcome) -> None:
    """Keep a call's outcome; a call has one."""
    if run.outcomes[step][call] is not None:
        raise protocol.ProtocolError("a second result for one call")
    run.outcomes[step][call] = outcome


def default_jobs() -> int:
    """One worker per core: each has the next submission waiting while the grader judges the last."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores)
