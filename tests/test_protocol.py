"""The frame reader's bounds, on real pipes: every violation is a ProtocolError, never a hang."""
from __future__ import annotations

import os
import struct
import threading
import time

import numpy as np
import pytest

from autograder import protocol


@pytest.fixture
def pipe():
    read_end, write_end = os.pipe()
    yield read_end, write_end
    for fd in (read_end, write_end):
        try:
            os.close(fd)
        except OSError:
            pass


def test_a_frame_round_trips_with_its_blob(pipe):
    read_end, write_end = pipe
    parts: list[bytes] = []
    value = protocol.encode((np.arange(6.0).reshape(2, 3), [1, True, None], {"x": 2.5}), parts, [0])
    os.write(write_end, protocol.pack({"ev": "result", "step": 0, "call": 0, "value": value}, b"".join(parts)))
    obj, blob = protocol.Reader(read_end).read(time.monotonic() + 1)
    assert protocol.check_value(obj["value"], len(blob)) == len(blob)
    array, items, facts = protocol.decode(obj["value"], blob)
    assert array.shape == (2, 3) and array[1, 2] == 5.0 and not array.flags.writeable
    assert items == [1, True, None] and facts == {"x": 2.5}


def test_a_header_announcing_more_than_the_cap_is_refused_at_once(pipe):
    read_end, write_end = pipe
    os.write(write_end, struct.pack("!4sII", protocol.MAGIC, 10, 200 << 20))
    started = time.monotonic()
    with pytest.raises(protocol.ProtocolError, match="larger than its limit"):
        protocol.Reader(read_end).read(time.monotonic() + 5)
    assert time.monotonic() - started < 1


def test_a_partial_frame_times_out_at_the_deadline(pipe):
    read_end, write_end = pipe
    os.write(write_end, protocol.pack({"ev": "end"})[:-3])
    started = time.monotonic()
    with pytest.raises(protocol.TimedOut):
        protocol.Reader(read_end).read(time.monotonic() + 0.3)
    assert 0.25 < time.monotonic() - started < 2


def test_a_trickle_cannot_stretch_the_deadline(pipe):
    read_end, write_end = pipe
    frame = protocol.pack({"ev": "end", "pad": "x" * 200})

    done = threading.Event()

    def trickle():
        for byte in frame:
            if done.is_set():  # never write after the test: its descriptor number gets reused
                return
            os.write(write_end, bytes([byte]))
            time.sleep(0.01)

    writer = threading.Thread(target=trickle, daemon=True)
    writer.start()
    started = time.monotonic()
    try:
        with pytest.raises(protocol.TimedOut):
            protocol.Reader(read_end).read(time.monotonic() + 0.5)
        assert time.monotonic() - started < 1.5
    finally:
        done.set()
        writer.join()


@pytest.mark.parametrize("data, message", [
    (b"XXXX" + struct.pack("!II", 2, 0) + b"{}", "header"),
    (struct.pack("!4sII", protocol.MAGIC, 5, 0) + b"{nope", "does not parse"),
    (struct.pack("!4sII", protocol.MAGIC, 2, 0) + b"[]", "not a JSON object"),
])
def test_malformed_frames_are_protocol_errors(pipe, data, message):
    read_end, write_end = pipe
    os.write(write_end, data)
    with pytest.raises(protocol.ProtocolError, match=message):
        protocol.Reader(read_end).read(time.monotonic() + 1)


def test_a_closed_channel_is_reported_as_closed(pipe):
    read_end, write_end = pipe
    os.close(write_end)
    with pytest.raises(protocol.Closed):
        protocol.Reader(read_end).read(time.monotonic() + 1)


@pytest.mark.parametrize("value, blob_len", [
    ({"t": "array", "dtype": "<f8", "shape": [1000, 1000], "n": 8_000_000}, 16),  # more than the blob
    ({"t": "array", "dtype": "<f8", "shape": [2, 2], "n": 8}, 64),  # n does not match the shape
    ({"t": "array", "dtype": "|O", "shape": [1], "n": 8}, 8),  # objects never cross
    ({"t": "array", "dtype": "<f8", "shape": [-1], "n": 8}, 8),
    ({"t": "list", "items": [{"t": "none"}] * (protocol.MAX_ITEMS + 1)}, 0),
    ({"t": "int", "v": 2**70}, 0),
    ({"t": "float", "v": "1e5"}, 0),
    ({"t": "float", "v": 10**400}, 0),  # JSON allows it; float() would overflow
    ({"t": "dict", "items": {"k": {"t": "nope"}}}, 0),
    ({"t": "bad", "type": "x" * (protocol.MAX_TEXT + 1)}, 0),
    ({"t": "none", "extra": 1}, 0),
])
def test_value_descriptions_are_checked_strictly(value, blob_len):
    with pytest.raises(protocol.ProtocolError):
        protocol.check_value(value, blob_len)


def test_nesting_is_bounded():
    value = {"t": "none"}
    for _ in range(protocol.MAX_DEPTH + 2):
        value = {"t": "list", "items": [value]}
    with pytest.raises(protocol.ProtocolError, match="too deep"):
        protocol.check_value(value, 0)


def test_subclasses_travel_as_their_base_type_read_through_its_own_methods():
    """CONTRACT.md §1: array-likes as np.asarray gives them, and any tuple subclass as a tuple."""
    from collections import OrderedDict
    from typing import NamedTuple

    class Pair(NamedTuple):
        o: np.ndarray
        a: np.ndarray

    class Liar(tuple):  # its own length and items are not asked
        def __len__(self):
            return 10**9

        def __iter__(self):
            return iter(())

    for value, kind, items in ((Pair(np.ones(2), np.zeros(2)), "tuple", 2), (Liar((np.ones(2), 1.0)), "tuple", 2),
                               (OrderedDict(a=np.ones(1)), "dict", 1)):
        described = protocol.encode(value, [], [0])
        assert described["t"] == kind and len(described["items"]) == items
    parts: list[bytes] = []
    assert protocol.encode(np.arange(4.0).reshape(2, 2).view(np.matrix), parts, [0])["shape"] == [2, 2]
    assert np.frombuffer(parts[0]).tolist() == [0.0, 1.0, 2.0, 3.0]
    parts = []
    assert protocol.encode(np.full(3, 0.1, dtype=np.longdouble), parts, [0])["dtype"] == "<f8"
    assert np.frombuffer(parts[0]).tolist() == [0.1] * 3
    assert protocol.encode(np.ones(2, dtype=complex), [], [0])["t"] == "bad"


@pytest.mark.parametrize("tail", [b',"ev":"done","job":2}', b',"step":5}', b',"call":3}', b',"ev":"fault"}'])
def test_a_result_whose_later_duplicate_key_says_otherwise_is_refused(pipe, tail):
    """A worker passes a result on by its first bytes; a duplicate key further on must not make the
    grader read it as anything else (the end of the job, another call's result, a fault)."""
    read_end, write_end = pipe
    body = b'{"ev":"result","step":0,"call":0,"value":{"t":"none"},"out":""' + tail
    os.write(write_end, protocol.pack_raw(body))
    with pytest.raises(protocol.ProtocolError, match="further on"):
        protocol.Reader(read_end).read(time.monotonic() + 1)


def test_a_result_that_starts_as_its_call_and_stays_so_is_read(pipe):
    read_end, write_end = pipe
    os.write(write_end, protocol.pack({"ev": "result", "step": 3, "call": 1, "value": {"t": "none"}, "out": ""}))
    obj, _ = protocol.Reader(read_end).read(time.monotonic() + 1)
    assert (obj["step"], obj["call"]) == (3, 1)
    # the way the sandboxed child writes it: the worker's fast path depends on these first bytes
    assert protocol.pack({"ev": "result", "step": 3, "call": 1, "value": {"t": "none"}})[
        protocol.HEADER_SIZE:].startswith(protocol.result_prefix(3, 1))


def test_lone_surrogates_arrive_escaped_and_pairs_whole(pipe):
    """A lone surrogate can only travel as a JSON escape, and no UTF-8 writer accepts it back."""
    read_end, write_end = pipe
    os.write(write_end, protocol.pack({"ev": "imported", "out": "a\ud800 \U0001f600",
                                       "answers": {"k\udcff": True}}))
    obj, _ = protocol.Reader(read_end).read(time.monotonic() + 1)
    assert obj == {"ev": "imported", "out": "a\\ud800 \U0001f600", "answers": {"k\\udcff": True}}
    obj["out"].encode("utf-8")


def _general_frame(step, call, value, out=""):
    parts: list[bytes] = []
    described = protocol.encode(value, parts, [0])
    return protocol.pack({"ev": "result", "step": step, "call": call, "value": described, "out": out},
                         b"".join(parts))


class _Pair(tuple):
    _fields = ("o", "a")


@pytest.mark.parametrize("value", [
    np.arange(12.0).reshape(3, 4), np.float64(2.5) * np.ones(()), np.zeros((0, 3)), np.ones((2, 3, 4)),
    np.arange(12.0).reshape(3, 4).T, np.asfortranarray(np.ones((2, 3))), np.arange(6.0)[::2],
    np.arange(4.0).astype(">f8"), np.ones(3, dtype=np.float32), np.arange(3), np.array([np.nan, np.inf, -0.0]),
    (np.ones(2), np.zeros((2, 2))), (), (np.ones(2), [1.0]), (np.ones(2), np.float32(1)), _Pair((np.ones(1), np.ones(1))),
    {"weights": np.ones(3), "output": np.zeros((1, 2))}, {}, {"ü\n\"": np.ones(1)}, {1: np.ones(1)},
    {"k" * 101: np.ones(1)}, True, False, np.bool_(True), 3, 2.5, None, [np.ones(2)],
    np.zeros(protocol.MAX_VALUE_BYTES // 8 + 1), (np.zeros(protocol.MAX_VALUE_BYTES // 16 + 1),) * 2,
    (np.zeros(protocol.MAX_VALUE_BYTES // 16),) * 2, np.frombuffer(b"\x01\x00\x00\x00\x00\x00\xf8\x7f"),
    np.zeros((1,) * 33), np.ones(2, dtype="=f8"), np.ones(2, dtype=np.dtype(float, metadata={"m": 1})),
    np.ones((2, 2)).view(np.matrix), np.ma.masked_array(np.ones(2)), {"k" * 100: np.ones(1)},
    {str(i): np.ones(1) for i in range(100)}, {str(i): np.ones(1) for i in range(101)}, {"a\udc80": np.ones(1)},
    (np.ones(1),) * 10_000, (np.ones(1),) * 10_001, np.empty((0, 2**31)), (np.ones(1), np.empty((2**23 + 1, 0))),
])
@pytest.mark.parametrize("out", ["", "printed\n\u00e9\ud800"])
def test_a_result_frame_is_the_general_encoding_byte_for_byte(value, out):
    """The common values take a shorter path to their frame: it must write exactly what the general
    path writes, or the grader would no longer know the reference's values by their bytes."""
    assert protocol.result_frame(4, 2, value, out) == _general_frame(4, 2, value, out)


@pytest.mark.parametrize("shape", [(0, 2**31), (2**23 + 1, 0), (0, 2**12, 2**12)])
def test_an_empty_array_with_vast_sides_is_a_bad_value_the_grader_can_read(pipe, shape):
    """numpy cannot rebuild such an array, so the grader would refuse its frame and lose the calls
    after it: it travels as a bad value instead, and costs only its own call."""
    read_end, write_end = pipe
    os.write(write_end, protocol.result_frame(0, 0, np.empty(shape)))
    obj, blob = protocol.Reader(read_end).read(time.monotonic() + 1)
    assert protocol.check_value(obj["value"], len(blob)) == 0
    assert protocol.decode(obj["value"], blob).type.startswith("empty numpy array of shape")


def test_a_planned_call_reaches_the_submission_as_read_only_values(pipe):
    reader_fd, writer_fd = pipe
    x = np.arange(12.0).reshape(3, 4)
    args = (x, [x[:1], np.array([True, False])], 3, None, float("inf"), (np.arange(4, dtype=np.int64),),
            {"w": x.T})
    os.write(writer_fd, protocol.call_frame(2, 5, "attention", args))
    step, call, name, got = protocol.read_call(protocol.Reader(reader_fd).read_raw(time.monotonic() + 5))
    assert (step, call, name) == (2, 5, "attention")
    assert [type(value) for value in got] == [np.ndarray, list, int, type(None), float, tuple, dict]
    assert np.array_equal(got[0], x) and np.array_equal(got[1][0], x[:1]) and got[1][1].tolist() == [True, False]
    assert got[2:5] == [3, None, float("inf")] and got[5][0].tolist() == [0, 1, 2, 3]
    assert np.array_equal(got[6]["w"], x.T)
    with pytest.raises(ValueError, match="read-only"):
        got[0][0, 0] = 1.0
    with pytest.raises(ValueError):
        got[0].flags.writeable = True


def test_only_plain_values_make_a_planned_call():
    with pytest.raises(ValueError, match="cannot be sent"):
        protocol.call_frame(0, 0, "attention", (object(),))


def _received(frames: list[bytes], job: int = 7, counts=(2,)):
    """What the grader's side of a worker makes of `frames` (no worker process: a pipe stands in)."""
    from autograder import runner

    class Started:  # a worker process as close() sees one
        def kill(self):
            pass

        def wait(self):
            pass

    read_end, write_end = os.pipe()
    worker = runner.Worker(mode="none")
    worker._process, worker._reader = Started(), protocol.Reader(read_end)
    run = runner.Run(outcomes=[[None] * count for count in counts], job=job)
    os.write(write_end, b"".join(frames + [protocol.pack({"ev": "done", "job": job})]))
    try:
        return worker.receive(run)
    finally:
        worker.close()  # closes the read end
        os.close(write_end)


def test_a_result_whose_text_was_checked_before_is_read_with_its_own_bytes_and_nothing_else(monkeypatch):
    from autograder import runner

    imported = protocol.pack({"ev": "imported", "ok": True, "job": 7, "out": ""})
    first, second = np.arange(6.0).reshape(2, 3), -np.arange(6.0).reshape(2, 3)
    frame = protocol.result_frame(0, 1, first)
    runner._CHECKED.pop(protocol.split(frame)[0], None)
    for value in (first, second):  # the same text twice, with other bytes the second time
        run = _received([imported, protocol.result_frame(0, 1, value)])
        assert run.lost is None, run.lost
        assert protocol.split(frame)[0] in runner._CHECKED  # read in full once, then kept
        got = run.outcomes[0][1]
        assert np.array_equal(got.value, value) and got.output == "" and not got.value.flags.writeable
    kept = len(runner._CHECKED)
    printed = _received([imported, protocol.result_frame(0, 1, first, "said")])
    assert printed.outcomes[0][1].output == "said" and len(runner._CHECKED) == kept  # not kept

    def resized(extra: int) -> bytes:  # the same text, announcing and carrying `extra` more bytes
        body = frame[12:] + b"\0" * extra if extra > 0 else frame[12:extra]
        return frame[:8] + struct.pack("!I", struct.unpack_from("!I", frame, 8)[0] + extra) + body

    for extra in (8, -8):  # more bytes than the text describes, or fewer: that call's own fault
        assert _refused(_received([imported, resized(extra)]), 0, 1) in (
            "bytes that no value describes", "an array whose data does not match its shape"), extra
    # A frame no call can own ends the worker's run: for a call not planned, or answered already.
    assert "not planned" in (_received([imported, frame], counts=(1,)).lost or "")
    assert "a second result" in (_received([imported, frame, frame]).lost or "")
    other = protocol.result_frame(0, 0, second)
    assert _received([imported, other]).lost is None  # its text is kept too
    monkeypatch.setattr(protocol, "MAX_JOB_BYTES", 60)  # room for one 48-byte array, not two
    assert "more array data" in _refused(_received([imported, frame, other]), 0, 0)


def _refused(run, step: int, call: int) -> str:
    """Why the grader refused the result of (step, call), which counts as that call's fault alone:
    the run itself goes on."""
    outcome = run.outcomes[step][call]
    assert run.lost is None and outcome is not None and outcome.fault == "protocol", (run.lost, outcome)
    return outcome.detail


def test_a_worker_closed_by_another_thread_while_its_run_is_read_loses_that_run_and_nothing_else():
    """An interrupted class run closes its workers from the main thread while grading threads are
    reading from them: the run being read is reported lost, and each descriptor is closed once."""
    from autograder import runner

    closed = []

    class Started:
        def kill(self):
            pass

        def wait(self):
            closed.append("process")

    read_end, write_end = os.pipe()
    worker = runner.Worker(mode="none")

    class ClosingReader(protocol.Reader):  # the other thread closes the worker after one frame
        def read_raw(self, deadline):
            raw = super().read_raw(deadline)
            worker.close()
            return raw

    worker._process, worker._reader = Started(), ClosingReader(read_end)
    os.write(write_end, protocol.pack({"ev": "imported", "ok": True, "job": 7, "out": ""}) * 2)
    run = worker.receive(runner.Run(outcomes=[[None]], job=7))
    worker.close()
    os.close(write_end)
    assert run.lost and closed == ["process"], (run.lost, closed)
    with pytest.raises(OSError):
        os.fstat(read_end)  # closed by the worker's close, once


def test_a_run_sent_to_a_worker_since_restarted_is_lost_and_never_read_from_the_new_one():
    from autograder import runner

    imported = protocol.pack({"ev": "imported", "ok": True, "job": 7, "out": ""})
    read_end, write_end = os.pipe()
    worker = runner.Worker(mode="none")
    worker._process, worker._reader, worker._generation = object(), protocol.Reader(read_end), 2
    os.write(write_end, imported)  # what the new process sent: not this run's to read
    try:
        run = worker.receive(runner.Run(outcomes=[[None]], job=7, generation=1))
        assert run.lost and not run.imported, run.lost
        assert worker._reader.buffer == b"" and os.read(read_end, 1 << 16) == imported  # left unread
    finally:
        worker._process = None
        os.close(read_end)
        os.close(write_end)


@pytest.mark.parametrize("item", [
    {"type": "NameError", "message": "x", "where": None, "defines": "softmax_rows"},
    {"type": "NameError", "message": "x", "where": None, "defines": ["softmax rows"]},
    {"type": "NameError", "message": "x", "where": None, "defines": [1]},
    {"type": "NameError", "message": "x", "where": None, "defines": ["a"] * 17},
    {"type": "NameError", "message": "x", "where": None, "more": 1},
])
def test_a_stopped_cell_says_only_which_identifiers_it_would_have_defined(item):
    with pytest.raises(protocol.ProtocolError):
        protocol.stopped([item])


def test_a_stopped_cell_keeps_the_functions_it_would_have_defined():
    item = {"type": "NameError", "message": "x", "where": "cell 3", "defines": ["softmax_rows"]}
    assert protocol.stopped([item]) == [item]
    assert protocol.stopped([dict(item, defines=[])]) == [{"type": "NameError", "message": "x", "where": "cell 3"}]


@pytest.mark.parametrize("bound", [
    [], {"attention": [3]}, {"attention": [1, "2"]}, {"attention": [0, 2]}, {"at tention": [1, 2]},
    {"attention": list(range(1, 10))}, {f"f{n}": [1, 2] for n in range(33)}, {"attention": [1, True]},
])
def test_names_bound_again_are_identifiers_with_two_to_eight_cell_numbers(bound):
    with pytest.raises(protocol.ProtocolError):
        protocol.bound(bound)


def test_what_a_notebook_cell_binds_is_read_from_its_bytecode_or_its_def_lines():
    from autograder.inside import _binds

    source = "import numpy as np\nfrom math import sqrt as softmax_rows\nif True:\n    def mix(a, v):\n        return a\nscores = 1\n"
    assert _binds(compile(source, "cell", "exec"), source) == ["mix", "scores", "softmax_rows"]
    broken = "def attention(q, k, v):\n    return (\ndef mix(a, v): pass\n"
    assert _binds(None, broken) == ["attention", "mix"]
