"""The wire format between the grader, its workers and the submissions' processes, with its bounds.

A frame is a 12-byte header (magic, JSON length, blob length), a JSON object, then a blob of raw
array bytes. The one exception is the frame of a planned call, which only the grader writes and
only a submission's process reads: its description is in marshal's format (`call_frame`). Every
read has a size cap and an absolute deadline, and every object read is checked against a strict
schema: any violation raises `ProtocolError`, which the reader's owner turns into
that submission's error. Nothing here trusts the other side; bounds belong to the reader, not to
checks sprinkled after it.

This module imports only the standard library (numpy lazily, for values): it also runs inside the
sandbox, beside `inside.py`.
"""
import json
import marshal
import math
import os
import re
import select
import struct
import time

MAGIC = b"QKV1"
_HEADER = struct.Struct("!4sII")  # magic, JSON length, blob length
HEADER_SIZE = _HEADER.size

MAX_JSON = 1 << 20
"""Bytes of JSON in one frame: a result's description and its captured output."""
MAX_VALUE_BYTES = 1 << 20
"""Array bytes one call may return: the largest value a hidden case expects is some 6 KiB (a batch
of weights), a batch mixed whole ([B, T, B, T]) a few times that."""
MAX_JOB_BYTES = 8 << 20
"""Array bytes one submission's run may return in all: what the grader holds of one submission in
flight (twice, with a carry-forward run), whatever each call returns."""
MAX_ITEMS = 10_000
MAX_DEPTH = 6
MAX_TEXT = 4000
"""Characters of any string field: messages, locations, captured output."""
MAX_INDEX = 1 << 20


class ProtocolError(Exception):
    """The other side broke the protocol; the message says how, in a few words."""


class Closed(ProtocolError):
    """The other side closed its end."""


class TimedOut(ProtocolError):
    """The deadline passed before a whole frame arrived."""


# ---------------------------------------------------------------- frames ----------------------


_encode_json = json.JSONEncoder(separators=(",", ":")).encode  # made once: json.dumps makes one a call
_decode_json = json.JSONDecoder().decode


def pack(obj, blob=b""):
    return pack_raw(_encode_json(obj).encode(), blob)


def pack_raw(data, blob=b""):
    return _HEADER.pack(MAGIC, len(data), len(blob)) + data + blob


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class Reader:
    """Reads frames from one descriptor, never past a deadline and never beyond its caps."""

    def __init__(self, fd, max_json=MAX_JSON, max_blob=MAX_VALUE_BYTES):
        self.fd, self.max_json, self.max_blob = fd, max_json, max_blob
        self.buffer = bytearray()

    def _header(self, at=0):
        """(JSON length, blob length) of the frame at `at` in the buffer, its header checked; None
        while its header is not all there."""
        if len(self.buffer) - at < _HEADER.size:
            return None
        magic, json_len, blob_len = _HEADER.unpack_from(self.buffer, at)
        if magic != MAGIC:
            raise ProtocolError("a frame without the protocol's header")
        if json_len > self.max_json or blob_len > self.max_blob:
            raise ProtocolError("a frame larger than its limit")
        return json_len, blob_len

    def _need(self):
        """Bytes still missing for the next whole frame (0: one is buffered). Checks the header."""
        lengths = self._header()
        if lengths is None:
            return _HEADER.size - len(self.buffer)
        return max(0, _HEADER.size + lengths[0] + lengths[1] - len(self.buffer))

    def buffered(self):
        """Is a whole frame already waiting in the buffer?"""
        return self._need() == 0

    def read(self, deadline):
        """The next frame as (object, blob); `deadline` is a time.monotonic() instant, or None."""
        return self.parse(self.read_raw(deadline))

    def read_raw(self, deadline):
        """The next whole frame as it came (header, JSON, blob), not parsed."""
        while True:
            missing = self._need()
            if not missing:
                break
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and (remaining <= 0 or not select.select([self.fd], [], [], remaining)[0]):
                raise TimedOut("no whole frame before the deadline")
            self._fill(max(missing, 1 << 16))
        return self._take()

    def pull(self):
        """The next whole frame, or None when the channel holds no whole frame yet: reads only what
        is there (the descriptor is non-blocking). Raises Closed once the channel is closed and no
        whole frame is left."""
        return self._take() if self.ready() else None

    def ready(self):
        """Is a whole frame buffered, once what the channel holds is read (without waiting)?"""
        while self._need():
            if not self._fill(1 << 16):
                return False
        return True

    def take_results(self, step, call, last, room):
        """From the buffer, the whole frames that are, in order, the results of calls `call` to
        `last` of step `step` by their first bytes (`result_prefix`, within the JSON the header
        bounds), as long as their arrays fit in `room` bytes in all: (those frames as one piece of
        bytes, how many, their arrays' bytes), or None when the next frame is not one of them.
        Nothing is read from the channel: the frames already there are passed on in bulk."""
        buffer, at, count, blobs, size = self.buffer, 0, 0, 0, _HEADER.size
        while call + count <= last:
            try:
                lengths = self._header(at)
            except ProtocolError:  # refused when it comes first: by `read_raw`, after the frames before it
                break
            if lengths is None:
                break
            json_len, blob_len = lengths
            whole = size + json_len + blob_len
            if (len(buffer) - at < whole or blobs + blob_len > room
                    or not buffer.startswith(result_prefix(step, call + count), at + size, at + size + json_len)):
                break
            at, count, blobs = at + whole, count + 1, blobs + blob_len
        if not count:
            return None
        taken = bytes(buffer[:at])
        del buffer[:at]
        return taken, count, blobs

    def _fill(self, size):
        """Add what one read brings to the buffer; False when a non-blocking channel had nothing."""
        try:
            chunk = os.read(self.fd, size)
        except BlockingIOError:
            return False
        except OSError as exc:
            raise Closed("the channel failed (%s)" % exc.strerror)
        if not chunk:
            raise Closed("the channel closed")
        self.buffer += chunk
        return True

    def _take(self):
        _, json_len, blob_len = _HEADER.unpack_from(self.buffer)
        size = _HEADER.size + json_len + blob_len
        raw = bytes(self.buffer[:size])
        del self.buffer[:size]
        return raw

    @staticmethod
    def parse(raw):
        """A whole frame (as `read_raw` returns it) as (object, blob).

        A frame whose JSON starts as a result for one call, `{"ev":"result","step":S,"call":C,`,
        must be that result: a worker may pass such a frame on having read no further than those
        bytes, so no later duplicate key may make it mean anything else.
        """
        text, blob = split(raw)
        try:
            obj = _decode_json(text.decode())
            if b"\\ud" in text or b"\\uD" in text:  # only an escape makes a lone surrogate: UTF-8 cannot
                obj = _escape_surrogates(obj)
        except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
            raise ProtocolError("a frame whose JSON does not parse")
        if type(obj) is not dict:
            raise ProtocolError("a frame that is not a JSON object")
        if text.startswith(_RESULT) and (obj.get("ev") != "result" or type(obj.get("step")) is not int
                                         or type(obj.get("call")) is not int
                                         or not text.startswith(result_prefix(obj["step"], obj["call"]))):
            raise ProtocolError("a result frame whose fields say otherwise further on")
        return obj, blob


_RESULT = b'{"ev":"result",'


def plain_text(text, cap=None):
    """`text` (a str, or a subclass of it) as a plain str that any frame carries and any UTF-8
    writer accepts: each lone surrogate written as its escape, \\udXXX, as a reader writes it (so
    its length is what a reader counts), and, given `cap`, cut to at most `cap` characters."""
    text = str.__str__(text)
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text if cap is None or len(text) <= cap else text[:cap - 1] + "…"


def _escape_surrogates(value):
    """`value` with every lone surrogate in its strings (keys too) written as its escape, \\udXXX.

    JSON may carry one (`"\\ud800"`), and a submission's output, messages and type names may hold
    one, but no UTF-8 file or terminal can: every result writer would fail on it."""
    kind = type(value)
    if kind is str:
        return plain_text(value)
    if kind is list:
        return [_escape_surrogates(item) for item in value]
    if kind is dict:
        return {_escape_surrogates(key): _escape_surrogates(item) for key, item in value.items()}
    return value


def split(raw):
    """A whole frame's JSON text and blob, as bytes, unread."""
    end = _HEADER.size + _HEADER.unpack_from(raw)[1]
    return raw[_HEADER.size:end], raw[end:]


def result_frame(step, call, value, out=""):
    """The frame of call `call` (an int) of step `step` (an int), which returned `value` and printed
    `out` (a str), as a submission's process writes it: the grader knows the reference's own value
    by these very bytes (runner.prepare).

    What calls mostly return (a float64 array, or a tuple or dict of them, or a bool) is written
    directly, in the very bytes the general path (`encode`, then JSON) would write."""
    import numpy as np

    blobs = []
    described = _plain_value(value, blobs, np)
    if described is None:
        blobs = []
        obj = {"ev": "result", "step": step, "call": call, "value": encode(value, blobs, [0]), "out": out}
        data = _encode_json(obj).encode()
        if len(data) > MAX_JSON:  # a value no reader takes: known by its type alone
            obj["value"], blobs = _bad("%s too large to send" % type_name(value)), []
            data = _encode_json(obj).encode()
        return pack_raw(data, b"".join(blobs))
    data = b'{"ev":"result","step":%d,"call":%d,"value":%s,"out":%s}' % (
        step, call, described, _encode_json(out).encode() if out else b'""')
    blob = b"".join(blobs)
    return _HEADER.pack(MAGIC, len(data), len(blob)) + data + blob


_FLOAT64 = b'{"t":"array","dtype":"<f8","shape":[%s],"n":%d}'


def _plain_array(value, blobs, room, np):
    """A little-endian float64 array's description, its bytes appended to `blobs`; None for any
    other value, or one larger than `room` bytes."""
    if type(value) is not np.ndarray or value.dtype.str != "<f8" or value.ndim > 32 or value.nbytes > room \
            or not value.size:  # an empty array's sides are checked on the general path
        return None
    data = value.tobytes()
    blobs.append(data)
    return _FLOAT64 % (b",".join([b"%d" % size for size in value.shape]), len(data))


def _plain_value(value, blobs, np):
    """The JSON of `value`'s description as `encode` gives it, for the common values; else None."""
    kind = type(value)
    if kind is bool:
        return b'{"t":"bool","v":true}' if value else b'{"t":"bool","v":false}'
    if kind is tuple or kind is dict:
        if len(value) > (MAX_ITEMS if kind is tuple else 100):
            return None
        room, parts = MAX_VALUE_BYTES, []
        for item in (value if kind is tuple else value.values()):
            part = _plain_array(item, blobs, room, np)
            if part is None:
                return None
            room -= len(blobs[-1])
            parts.append(part)
        if kind is tuple:
            return b'{"t":"tuple","items":[%s]}' % b",".join(parts)
        if not all(type(key) is str and key.isascii() and len(key) <= 100 for key in value):
            return None  # the general path decides
        return b'{"t":"dict","items":{%s}}' % b",".join(
            [b"%s:%s" % (_encode_json(key).encode(), part) for key, part in zip(value, parts)])
    return _plain_array(value, blobs, MAX_VALUE_BYTES, np)


def call_frame(step, call, fn, args):
    """The frame of call `call` of step `step`, which calls `fn` with `args`, as the grader writes it
    and a submission's process reads it (`read_call`): the arguments described in marshal's format,
    then their arrays' bytes.

    Only the grader writes these, and only a submission's process reads them: marshal is no format
    to read from an untrusted writer, but here the reader is the untrusted side, and it reads one
    such frame several times faster than the same description in JSON."""
    blobs = []
    described = _compact(encode(list(args), blobs, [0]))
    return pack_raw(marshal.dumps((step, call, fn, described)), b"".join(blobs))


def _compact(described):
    """An argument's description (as `encode` gives it) as nested tuples, each tagged by its first item."""
    kind = described["t"]
    if kind == "array":
        return ("a", described["dtype"], tuple(described["shape"]), described["n"])
    if kind in ("list", "tuple"):
        return (kind, tuple(_compact(item) for item in described["items"]))
    if kind == "dict":
        return ("dict", tuple((key, _compact(item)) for key, item in described["items"].items()))
    if kind == "float":
        return ("v", float(described["v"]))  # a non-finite float is described by its repr
    if kind in ("bool", "int", "none"):
        return ("v", described.get("v"))
    raise ValueError("a planned call's argument that cannot be sent: %s" % described.get("type"))


def read_call(raw):
    """(step, call, function name, arguments) of a whole frame `call_frame` wrote. Its arrays are
    read-only views of the frame's own bytes: writing into one raises where it happens."""
    import numpy as np

    end = HEADER_SIZE + _HEADER.unpack_from(raw)[1]
    step, call, fn, described = marshal.loads(memoryview(raw)[HEADER_SIZE:end])
    return step, call, fn, _expand(described, raw, [end], np)


def _expand(described, raw, offset, np):
    kind = described[0]
    if kind == "a":
        _, dtype, shape, size = described
        array = np.frombuffer(raw, dtype, size // int(dtype[2:]), offset[0]).reshape(shape)
        offset[0] += size
        return array
    if kind == "v":
        return described[1]
    if kind == "dict":
        return {key: _expand(item, raw, offset, np) for key, item in described[1]}
    items = [_expand(item, raw, offset, np) for item in described[1]]
    return items if kind == "list" else tuple(items)


def result_prefix(step, call):
    """How the JSON of call `call` of step `step`'s result frame starts, byte for byte."""
    return b'{"ev":"result","step":%d,"call":%d,' % (step, call)


_RESULT_PREFIX = re.compile(rb'\{"ev":"result","step":(0|[1-9][0-9]{0,6}),"call":(0|[1-9][0-9]{0,6}),')


def result_place(text):
    """(step, call) of a result frame's JSON `text` by its first bytes (`result_prefix`), or None
    when it does not start as a result does."""
    found = _RESULT_PREFIX.match(text)
    return None if found is None else (int(found.group(1)), int(found.group(2)))


def read_exactly(fd, count):
    """Exactly `count` bytes, blocking, never one more: for the grader's own, trusted stream,
    where what follows belongs to another reader."""
    chunks = []
    while count:
        chunk = os.read(fd, min(count, 1 << 20))
        if not chunk:
            raise Closed("the channel closed")
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def read_head(fd):
    """A frame's JSON object, leaving its blob unread in `fd`; returns (object, blob length)."""
    magic, json_len, blob_len = _HEADER.unpack(read_exactly(fd, _HEADER.size))
    if magic != MAGIC:
        raise ProtocolError("a frame without the protocol's header")
    obj = json.loads(read_exactly(fd, json_len))
    if type(obj) is not dict:
        raise ProtocolError("a frame that is not a JSON object")
    return obj, blob_len


# ---------------------------------------------------------------- schema ----------------------


def _fail(what):
    raise ProtocolError(what)


def text(obj, key, optional=False):
    value = obj.get(key)
    if value is None and optional:
        return None
    if type(value) is not str or len(value) > MAX_TEXT:
        _fail("field %r is not a short string" % key)
    return value


def index(obj, key, optional=False):
    value = obj.get(key)
    if value is None and optional:
        return None
    if type(value) is not int or not 0 <= value < MAX_INDEX:
        _fail("field %r is not an index" % key)
    return value


def only(obj, *keys):
    """The object has no key beyond `keys`."""
    extra = set(obj) - set(keys)
    if extra:
        _fail("unexpected fields %s" % [name if len(name) <= 40 else name[:39] + "…" for name in sorted(extra)[:3]])


def reason(exc):
    """Why the other side's frame was refused, as a message may carry it: a few words, however long
    the refused frame made them."""
    text = plain_text(str(exc))
    return text if len(text) <= 200 else text[:199] + "…"


def raised(obj):
    """An exception description: {type, message, where}, each kept to one line (`one_line`): the
    submission wrote all three (a class's name, a message, a function's or a file's name in its
    location), and whatever quotes them must not get a line of its own from them."""
    if type(obj) is not dict:
        _fail("an exception that is not an object")
    only(obj, "type", "message", "where")
    where = text(obj, "where", True)
    return {"type": one_line(text(obj, "type")), "message": one_line(text(obj, "message")),
            "where": None if where is None else one_line(where)}


_BREAKS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text):
    """`text` with every control character and line break (a newline, a carriage return, U+2028...)
    written as its escape (\\x0a, \\u2028), as results.printable writes them."""
    if _BREAKS.search(text) is None:
        return text
    return _BREAKS.sub(lambda found: "\\x%02x" % ord(found.group()) if ord(found.group()) < 0x80
                       else "\\u%04x" % ord(found.group()), text)


def result_body(obj, blob, used):
    """Check what a call returned: an exception with no bytes beside it, or a value that accounts
    for every byte of `blob` within the submission's budget. Returns the bytes used so far."""
    if "raised" in obj:
        if blob:
            _fail("bytes beside an exception")
        raised(obj["raised"])
        return used
    if check_value(obj.get("value"), len(blob)) != len(blob):
        _fail("bytes that no value describes")
    if used + len(blob) > MAX_JOB_BYTES:
        _fail("more array data than a submission may return")
    return used + len(blob)


MAX_STOPPED = 5

PER_EXAMPLE = "@each-example"
"""Among the names a step called again replaces: none is replaced, and each batch call (an array of
three axes first) is made once for each example alone, the results returned together as a tuple."""
"""Notebook cells that stopped with an error, reported per submission."""


def stopped(obj):
    """The notebook cells that stopped with an error: a short list of exception descriptions, each
    with the graded functions the cell would have bound had it run to the end ("defines"), if any."""
    if type(obj) is not list or len(obj) > MAX_STOPPED:
        _fail("stopped cells that are not a short list")
    found = []
    for item in obj:
        defines = item.get("defines", []) if type(item) is dict else []
        if type(defines) is not list or len(defines) > 16 or not all(map(is_name, defines)):
            _fail("names a stopped cell defines that are not identifiers")
        entry = raised({key: value for key, value in item.items() if key != "defines"} if type(item) is dict else item)
        if defines:
            entry["defines"] = list(defines)
        found.append(entry)
    return found


MOST_BOUND = 32


def bound(obj):
    """Per name of a notebook bound by two cells or more (a graded function, or a value one reads
    from outside it), the numbers of those cells, in order (at most the last eight)."""
    if type(obj) is not dict or len(obj) > MOST_BOUND:
        _fail("names bound again that are not a small object")
    for key, cells in obj.items():
        if (not is_name(key) or type(cells) is not list or not 2 <= len(cells) <= 8
                or any(type(cell) is not int or not 1 <= cell <= 1 << 20 for cell in cells)):
            _fail("names bound again that are not identifiers with cell numbers")
    return obj


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,39}")


def is_name(text) -> bool:
    """Is `text` a name the protocol carries (a function's, or a value's a function reads): an ASCII
    identifier of at most 40 characters? The child sends no other, so that what it reports of a
    notebook's own names (`Ω`, or one of fifty letters) never breaks the frame it reports them in."""
    return type(text) is str and _NAME.fullmatch(text) is not None


def outside(obj):
    """Per graded function, a few names (of the values defined outside it that it reads, or of its
    parameters that have defaults): a small object of identifiers."""
    if type(obj) is not dict or len(obj) > 16:
        _fail("names per function that are not a small object")
    for key, names in obj.items():
        if not is_name(key) or type(names) is not list or len(names) > 8 or not all(map(is_name, names)):
            _fail("names per function that are not identifiers")
    return obj


def answers(obj):
    if type(obj) is not dict or len(obj) > 16:
        _fail("answers that are not a small object")
    if any(type(k) is not str or len(k) > 40 or type(v) is not bool for k, v in obj.items()):
        _fail("answers that are not names and booleans")
    return obj


# ---------------------------------------------------------------- values ----------------------

DTYPES = ("<f8", "<f4", "<f2", "<i8", "<i4", "<i2", "|i1", "<u8", "<u4", "<u2", "|u1", "|b1")


def encode(value, blobs, used):
    """Describe `value` as JSON-able plain data, appending array bytes to `blobs`.

    As CONTRACT.md promises, a subclass of ndarray, tuple (a NamedTuple), list or dict is read as
    its base type, through the base type's own methods only (a subclass's own `__len__` or
    `__iter__` could say anything), and floats wider than float64 (longdouble) arrive as float64,
    as np.asarray(..., dtype=float) would give them; any other object is described by its type
    name, so nothing a submission defines can pretend to be a number. `used` is a one-item list:
    the array bytes described so far.
    """
    import numpy as np

    start, state = len(blobs), [used[0], MAX_PARTS]  # array bytes so far, parts still allowed
    try:
        described = _encode(value, blobs, state, 0, np)
    except _TooManyParts:
        del blobs[start:]
        return _bad("%s of more than %d parts" % (type_name(value), MAX_PARTS))
    used[0] = state[0]
    return described


MAX_PARTS = 20_000
"""Values, arrays and containers one returned value may hold in all: ample for any answer here (a
[16, 16] matrix as nested lists has 273), and few enough to describe in a fraction of a call's
time, however cheaply the value was made ([row] * 1000 shares one row)."""


class _TooManyParts(Exception):
    pass


def _bad(description):
    """A value known only by a description, as plain text short enough for any reader."""
    return {"t": "bad", "type": plain_text("%s" % (description,), 200)}


def _encode(value, blobs, state, depth, np):
    state[1] -= 1
    if state[1] < 0:
        raise _TooManyParts()
    kind = type(value)
    if kind is not np.ndarray and isinstance(value, np.ndarray):  # np.matrix, say: its plain array
        value, kind = np.ndarray.view(value, np.ndarray), np.ndarray
    if kind is np.ndarray:
        if value.dtype.kind == "f" and value.dtype.itemsize > 8:
            value = value.astype(np.float64)
        if value.dtype.kind not in "biuf":
            return _bad("numpy array of dtype %s" % value.dtype)
        if value.ndim > 32:
            return _bad("numpy array of %d dimensions" % value.ndim)
        little = value.astype(value.dtype.newbyteorder("<")) if value.dtype.byteorder == ">" else value
        if little.dtype.str not in DTYPES:
            return _bad("numpy array of dtype %s" % value.dtype)
        if little.nbytes > MAX_VALUE_BYTES - state[0]:
            return _bad("numpy array of %d bytes (too large)" % value.nbytes)
        if not value.size and not _sides_fit(value.shape):  # empty, but with sides no reader accepts
            return _bad("empty numpy array of shape %s (too large)" % list(value.shape))
        data = np.ascontiguousarray(little).tobytes()
        blobs.append(data)
        state[0] += len(data)
        return {"t": "array", "dtype": little.dtype.str, "shape": list(value.shape), "n": len(data)}
    if kind is bool or kind is np.bool_:
        return {"t": "bool", "v": bool(value)}
    if kind is int or (isinstance(value, np.integer) and kind.__module__ == "numpy"):
        return {"t": "int", "v": int(value)} if abs(int(value)) < 2**63 else {"t": "float", "v": float(value)}
    if kind is float or (isinstance(value, np.floating) and kind.__module__ == "numpy"):
        number = float(value)
        return {"t": "float", "v": number if math.isfinite(number) else repr(number)}
    if value is None:
        return {"t": "none"}
    if isinstance(value, (list, tuple)):
        base = list if isinstance(value, list) else tuple
        if base.__len__(value) > MAX_ITEMS or depth >= MAX_DEPTH:
            return _bad("%s nested too deep or too long" % type_name(value))
        return {"t": base.__name__, "items": [_encode(item, blobs, state, depth + 1, np)
                                              for item in base.__iter__(value)]}
    if isinstance(value, dict):
        items = list(dict.items(value)) if dict.__len__(value) <= 100 else None
        if items is None or depth >= MAX_DEPTH or not all(_plain_key(key) for key, _ in items):
            return _bad("dict with keys that are not plain strings")
        return {"t": "dict", "items": {key: _encode(item, blobs, state, depth + 1, np) for key, item in items}}
    return _bad(type_name(value))


def _plain_key(key):
    """A dict key any reader takes: a str of at most 100 characters as a reader counts them (a lone
    surrogate is a six-character escape there)."""
    return type(key) is str and len(plain_text(key)) <= 100


def _sides_fit(shape):
    """Is every side of `shape` below 2**31, and the product of its sides (an empty side counted as
    one) within MAX_VALUE_BYTES? numpy refuses to build a shape whose other sides are vast even
    when the array is empty, so no reader accepts one: an encoder describes such an array as bad."""
    volume = 1
    for size in shape:
        if size >= 1 << 31:
            return False
        volume *= max(size, 1)
    return volume <= MAX_VALUE_BYTES


def type_name(value):
    kind = type(value)
    module = getattr(kind, "__module__", "?")
    name = getattr(kind, "__name__", "?")
    text = name if module in ("builtins", "attention_head") else "%s.%s" % (module, name)
    return ("%s" % (text,))[:200]  # a plain str, whatever a name or module claims to be


class Bad:
    """A returned object the judge will not compare: it is only known by its type name."""

    __slots__ = ("type",)

    def __init__(self, type_name):
        self.type = type_name

    def __repr__(self):
        return "<%s>" % self.type


def check_value(obj, blob_len, offset=0, depth=0):
    """Validate a value description against the blob it points into; returns the new offset."""
    if type(obj) is not dict:
        _fail("a value that is not an object")
    kind = obj.get("t")
    if kind == "array":
        only(obj, "t", "dtype", "shape", "n")
        dtype, shape, n = obj.get("dtype"), obj.get("shape"), obj.get("n")
        if dtype not in DTYPES or type(shape) is not list or len(shape) > 32 or type(n) is not int:
            _fail("an array with an unsupported description")
        if any(type(size) is not int or size < 0 for size in shape) or not _sides_fit(shape):
            _fail("an array with an invalid shape")
        count = math.prod(shape)
        if count * int(dtype[2:]) != n or n > blob_len - offset:
            _fail("an array whose data does not match its shape")
        return offset + n
    if kind == "bool":
        only(obj, "t", "v")
        if type(obj.get("v")) is not bool:
            _fail("a bool that is not one")
    elif kind == "int":
        only(obj, "t", "v")
        if type(obj.get("v")) is not int or abs(obj["v"]) >= 2**63:
            _fail("an int that is not one")
    elif kind == "float":
        only(obj, "t", "v")
        value = obj.get("v")
        if type(value) not in (float, int) and value not in ("nan", "inf", "-inf") \
                or type(value) is int and abs(value) >= 2**63:  # float() would overflow on a vast int
            _fail("a float that is not one")
    elif kind == "none":
        only(obj, "t")
    elif kind in ("list", "tuple", "dict"):
        only(obj, "t", "items")
        items = obj.get("items")
        if depth >= MAX_DEPTH:
            _fail("a value nested too deep")
        if kind == "dict":
            if type(items) is not dict or len(items) > 100 or any(len(key) > 100 for key in items):
                _fail("a dict that is not a small object")
            items = items.values()
        elif type(items) is not list or len(items) > MAX_ITEMS:
            _fail("a sequence that is not a short list")
        for item in items:
            offset = check_value(item, blob_len, offset, depth + 1)
    elif kind == "bad":
        only(obj, "t", "type")
        text(obj, "type")
    else:
        _fail("a value of unknown kind")
    return offset


def decode(obj, blob, offset=None):
    """Turn a description `check_value` accepted back into values."""
    import numpy as np

    offset = offset if offset is not None else [0]
    kind = obj["t"]
    if kind == "array":
        dtype, shape, n = obj["dtype"], obj["shape"], obj["n"]
        count = n // int(dtype[2:])
        array = np.frombuffer(blob, dtype=dtype, count=count, offset=offset[0]).reshape(shape)
        offset[0] += n
        return array
    if kind in ("bool", "int"):
        return obj["v"]
    if kind == "float":
        return float(obj["v"])
    if kind == "none":
        return None
    if kind in ("list", "tuple"):
        items = [decode(item, blob, offset) for item in obj["items"]]
        return items if kind == "list" else tuple(items)
    if kind == "dict":
        return {key: decode(item, blob, offset) for key, item in obj["items"].items()}
    return Bad(obj["type"])
