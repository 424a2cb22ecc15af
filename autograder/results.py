"""Results are data; text, JSON, Gradescope's results.json and CSV are views of the same objects."""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from .steps import BY_ID, STEPS

SCHEMA = Path(__file__).resolve().parent / "_data" / "results.schema.json"  # _data: the project's data/
VERSION = "1"


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
    case_passed: list[bool] = field(default_factory=list)
    """Per case, in case order (the chapter's example first): did it pass?"""
    carried_from: str | None = None
    """The earlier step whose mistake alone explains every wrong value here, so that this step
    keeps its points (the error carried forward); None when its score is its own cases'."""


@dataclass
class SubmissionResult:
    submission: str
    steps: list[StepResult]
    seed: int
    isolation: str
    answers: dict[str, bool] | None = None
    """Module-level written answers, present and non-empty (None for notebooks: graded by a person)."""
    output: str = ""
    """What the submission printed while it was imported (capped)."""
    seconds: float = 0.0
    error: str | None = None
    """Set only when the file could not be graded at all (unreadable, corrupt notebook)."""

    @property
    def score(self) -> float:
        return round(sum(step.score for step in self.steps), 2)

    @property
    def max_score(self) -> float:
        return round(sum(step.max_score for step in self.steps), 2)

    def to_dict(self) -> dict:
        document = {
            "submission": self.submission,
            "score": self.score,
            "max_score": self.max_score,
            "steps": [{"id": s.id, "score": s.score, "max_score": s.max_score, "status": s.status,
                       # what a student's code printed or raised, quoted: a terminal's controls shown
                       # escaped, as on the console (`jq -r` prints the text as it stands)
                       "feedback": printable(s.feedback), "diagnoses": list(s.diagnoses),
                       "cases_passed": s.passed, "cases_total": s.total, "carried_from": s.carried_from}
                      for s in self.steps],
            "seed": self.seed,
            "isolation": self.isolation,
            "results_version": VERSION,
        }
        if self.answers is not None:
            document["written_answers"] = self.answers
        if self.error:
            document["error"] = self.error
        if self.output:
            document["output"] = printable(self.output)
        return document


def from_dict(document: dict) -> SubmissionResult:
    """A result read back from its JSON document (`to_dict`'s inverse, less the seconds)."""
    steps = [StepResult(s["id"], s["score"], s["max_score"], s["status"], s["feedback"], list(s["diagnoses"]),
                        s["cases_passed"], s["cases_total"], carried_from=s.get("carried_from"))
             for s in document["steps"]]
    return SubmissionResult(document["submission"], steps, document["seed"], document["isolation"],
                            answers=document.get("written_answers"), output=document.get("output", ""),
                            error=document.get("error"))


def unreadable(name: str, message: str, seed: int, isolation: str) -> SubmissionResult:
    """A submission that could not be read: every step is an error, with the reason, kept to one line
    (it quotes the submission's name, which its maker chose)."""
    message = printable(message, one_line=True)
    steps = [StepResult(step.id, 0.0, step.points, "error", f"{step.title}: not graded. {message}", ["unreadable"], 0, 1)
             for step in STEPS]
    return SubmissionResult(name, steps, seed, isolation, error=message)


# ------------------------------------------------------------------ views -----------------------


def to_json(results: list[SubmissionResult], single: bool) -> str:
    """One result, indented; or a list of them, one submission per line (json's indenting is ten
    times slower, and a class's list is read by programs, or a line at a time)."""
    if single:
        return dumps(results[0].to_dict(), indent=2) + "\n"
    return "".join(json_lines(results))


def json_lines(results: Iterable[SubmissionResult]) -> Iterator[str]:
    """`to_json` of a list, in pieces: a class's list is written as its results are read."""
    return _array_lines(dumps(result.to_dict()) for result in results)


def gradescope_lines(results: Iterable[SubmissionResult]) -> Iterator[str]:
    """`json.dumps([to_gradescope(r) for r in results], indent=2)` and a newline, in pieces."""
    return _array_lines((dumps(to_gradescope(result), indent=2).replace("\n", "\n  ")
                         for result in results), indent="  ")


def _array_lines(items: Iterable[str], indent: str = "") -> Iterator[str]:
    """A JSON array of items already written as JSON, each item as it comes."""
    first = True
    for text in items:
        yield ("[\n" if first else ",\n") + indent + text
        first = False
    yield "[]\n" if first else "\n]\n"


def to_gradescope(result: SubmissionResult, visibility: str = "visible") -> dict:
    """Gradescope's results.json: one test per step, the feedback as its output.

    What the student sees is the top-level output and the tests, tagged with their diagnosis codes
    (none when nothing ran: a file that could not be read did not crash).
    The seed and the isolation go to `extra_data`, which Gradescope stores for the instructor
    only: the seed picks the hidden cases, so it is no business of the student's.
    """
    tests = []
    for step in result.steps:
        info = BY_ID[step.id]
        tests.append({"name": f"{step.id}: {info.title} ({info.section})", "number": str(len(tests) + 1),
                      "score": step.score, "max_score": step.max_score,
                      # a step whose credit is carried forward passes: its own work checks out
                      "status": "passed" if step.status == "passed" or step.carried_from else "failed",
                      "output": printable(step.feedback), "tags": [] if result.error else list(step.diagnoses),
                      "visibility": visibility})
    if result.error:
        lines = [f"Your submission could not be graded: {printable(result.error)}", "Fix that and submit again."]
    else:
        lines = [f"Score {result.score:g} / {result.max_score:g}."]
        if any(step.status != "passed" for step in result.steps):
            lines.append("Open each failed test below: it says what went wrong, where to look and "
                         "which section to reread.")
    if result.answers is not None:
        missing = [name for name, ok in result.answers.items() if not ok]
        if missing:
            lines.append("Written answers still empty: " + printable(", ".join(missing), one_line=True) + ".")
    # Plain text, said rather than left to Gradescope's default: feedback quotes what a student's
    # code raised or printed, which no page should read as markup.
    return {"score": result.score, "output": " ".join(lines), "output_format": "text",
            "test_output_format": "text", "visibility": visibility,
            "stdout_visibility": "hidden", "execution_time": round(result.seconds, 2), "tests": tests,
            "extra_data": {"submission": result.submission, "seed": result.seed,
                           "isolation": result.isolation, "results_version": VERSION}}


# Characters of Unicode's category Cf ("format"): no glyph of their own, yet they reorder a line
# (U+202E), join or part what is beside them, or hide in a name (U+200B makes `ada\u200b.py` look
# like `ada.py`). Shown escaped wherever a student's text is printed.
_FORMAT_RANGES = ((0xAD, 0xAD), (0x600, 0x605), (0x61C, 0x61C), (0x6DD, 0x6DD), (0x70F, 0x70F), (0x890, 0x891),
                  (0x8E2, 0x8E2), (0x180E, 0x180E), (0x200B, 0x200F), (0x202A, 0x202E), (0x2060, 0x2064),
                  (0x2066, 0x206F), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD),
                  (0x13430, 0x1343F), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001),
                  (0xE0020, 0xE007F))
# And the rest of Unicode's default-ignorable code points, which a font draws as nothing though
# they are no format characters: the combining grapheme joiner, the Hangul fillers, the variation
# selectors (U+FE0F makes `ada\ufe0f.py` look like `ada.py` too). Then every space but the plain
# one, which reads as one (`jo\u00a0li.py` as `jo li.py`).
_IGNORABLE_RANGES = ((0x34F, 0x34F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x2065, 0x2065),
                     (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8),
                     (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F),
                     (0x205F, 0x205F), (0x3000, 0x3000))
_INVISIBLE = frozenset(code for first, last in _FORMAT_RANGES + _IGNORABLE_RANGES for code in range(first, last + 1))
# Plane 14's tags and variation selectors, assigned or not, all default-ignorable: tested as a range
# (4 096 codes, a set and a table of which would cost the grader's start-up two milliseconds).
_PLANE_14 = (0xE0000, 0xE0FFF)
_PLANE_14_CHARS = re.compile("[%s-%s]" % (chr(_PLANE_14[0]), chr(_PLANE_14[1])))


def _surrogates(code: int) -> str:
    """A character past the BMP escaped as JSON writes it: two surrogates."""
    return "\\u%04x\\u%04x" % (0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF))


# In JSON text, what a terminal or an editor would act on rather than show: C1 controls (0x9b
# starts a control sequence on some terminals), the marks that reorder a line, and the separators
# some readers take for line breaks. JSON escapes the C0 controls itself; these only appear inside
# strings, where an escape means the same character.
_JSON_ESCAPES = {code: _surrogates(code) if code > 0xFFFF else "\\u%04x" % code
                 for code in (*range(0x80, 0xa0), *_INVISIBLE, 0x2028, 0x2029)}


def _ranges(codes) -> str:
    """A regular expression's character class of `codes`, as runs of consecutive codes."""
    runs, codes = [], sorted(codes)
    for code in codes:
        if runs and code == runs[-1][1] + 1:
            runs[-1][1] = code
        else:
            runs.append([code, code])
    return "".join(re.escape(chr(first)) + ("-" + re.escape(chr(last)) if last > first else "") for first, last in runs)


# Any character `dumps` escapes: most results have none, and looking for one costs a quarter of
# translating every character of the text.
_ESCAPED = re.compile("[%s%s-%s]" % (_ranges(_JSON_ESCAPES), chr(_PLANE_14[0]), chr(_PLANE_14[1])))


def dumps(value, indent: int | None = None) -> str:
    """`json.dumps(value, ensure_ascii=False)`, with the characters above escaped: the names and
    messages in results are students' own."""
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    if _ESCAPED.search(text) is None:
        return text
    return _PLANE_14_CHARS.sub(lambda found: _surrogates(ord(found.group())), text.translate(_JSON_ESCAPES))


def printable(text: str, one_line: bool = False) -> str:
    """`text` safe for a terminal: control characters (ESC, BEL, carriage returns, …) and the
    invisible direction marks that reorder a line are shown escaped, never sent as they are.
    Submission names, messages and output come from students. `one_line` escapes line breaks and
    tabs too: a name in a listing of one line per submission must not start a line of its own. A
    character from 0x80 on is `\\u0085`, never `\\x85`: that is a byte of a name that is not UTF-8
    (`submission.shown_name`)."""
    if (_UNSAFE_ONE_LINE if one_line else _UNSAFE).search(text) is None:  # most text: nothing to escape
        return text
    kept = "" if one_line else "\n\t"
    return "".join(char if char in kept or (" " <= char < "\x7f") or (
        ord(char) > 0x9f and ord(char) not in _INVISIBLE and not _PLANE_14[0] <= ord(char) <= _PLANE_14[1]) else "\\x%02x" % ord(char) if ord(char) < 0x80
        else "\\u%04x" % ord(char) if ord(char) <= 0xFFFF else "\\U%08x" % ord(char) for char in text)


# Every character `printable` escapes: a search for one is much cheaper than a look at each character.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f%s%s-%s]" % (_ranges({*range(0x7f, 0xa0), *_INVISIBLE}),
                                                      chr(_PLANE_14[0]), chr(_PLANE_14[1])))
_UNSAFE_ONE_LINE = re.compile("[\x00-\x1f%s%s-%s]" % (_ranges({*range(0x7f, 0xa0), *_INVISIBLE}),
                                                     chr(_PLANE_14[0]), chr(_PLANE_14[1])))

# Letters drawn as a plain Latin one (Cyrillic and Greek, in both cases, and Latin's own phonetic
# letters and small capitals), each with the letter it passes for: `\u0430da.py` shows as `ada.py`, `\u0441\u0441.py` as `cc.py`.
LOOK_ALIKES = {pair[0]: pair[1] for pair in (
    "аa вb еe ёe кk мm нh оo рp сc тt уy хx ѕs іi їi јj ԁd ԛq ԝw ӏl һh ѵv ьb "
    "Аa Вb Еe Ѐe Ёe Кk Мm Нh Оo Рp Сc Тt Уy Хx Ѕs Іi Їi Јj Ԛq Ԝw Ӏl Һh Ѵv "
    "αa βb γy εe ιi κk νv οo ρp τt υu χx ωw Αa Βb Εe Ζz Ηh Ιi Κk Μm Νn Οo Ρp Τt Υy Χx "
    # and Latin letters of the phonetic alphabets and small capitals, drawn as plain ones
    "ɑa ɒa ɡg ɩi ǀl ʋu ɵo ᴀa ʙb ᴄc ᴅd ᴇe ɢg ʜh ɪi ᴊj ᴋk ʟl ᴍm ɴn ᴏo ᴘp ʀr ꜱs ᴛt ᴜu ᴠv ᴡw ʏy ᴢz").split()}
_WORD = re.compile(r"[^\W\d_]+")


_OWN_BACKSLASH = re.compile(r"\\(?!x[89a-f][0-9a-f])")


def printable_name(name: str) -> str:
    """A submission's name for a listing, one line (`printable`), and never drawn like another's: in
    a name that is not as Unicode composes it (`jose\u0301.py` beside `jos\u00e9.py`), its combining
    marks are shown escaped, as are letters and digits a compatibility form draws like plain ones
    (fullwidth, mathematical, ligatures), and, in a word that mixes Latin letters with another script's or is written
    wholly in another script's letters that pass for Latin ones (`\u0430da`, `\u0441\u0441`), those
    letters. A name written in one script, as its writer's keyboard types it, shows as it is. A
    backslash of the name's own shows twice: a file named `a\\x09b.py` never shows as the one whose
    name holds a tab, nor `\\u0430da.py` as `\u0430da.py`. (A byte of a name that is not UTF-8,
    `\\xff` as `shown_name` writes it, stays as it is: such a file is listed, never graded.)"""
    import unicodedata

    text = printable(_OWN_BACKSLASH.sub(r"\\\\", name), one_line=True)
    if text.isascii():
        return text
    decomposed = unicodedata.normalize("NFC", text) != text
    odd = {char for char in text if (decomposed and unicodedata.category(char).startswith("M"))
           or (unicodedata.category(char)[0] in "LN"
               and unicodedata.normalize("NFKC", char) != unicodedata.normalize("NFC", char))}
    for word in _WORD.findall(text):
        if word.isascii():
            continue
        foreign = [char for char in word if not char.isascii()
                   and (char in LOOK_ALIKES or not unicodedata.name(char, "").startswith("LATIN"))]
        if foreign and (len(foreign) < len(word) or all(char in LOOK_ALIKES for char in word)):
            odd.update(foreign)
    if not odd:
        return text
    return "".join("\\u%04x" % ord(char) if char in odd and ord(char) <= 0xFFFF else
                   "\\U%08x" % ord(char) if char in odd else char for char in text)


def look(name: str) -> str:
    """What a name looks like, as a reader sees it: two names that look alike look the same here
    (case, Unicode's compatibility forms and combining marks aside, and the letters of
    LOOK_ALIKES read as the Latin ones they pass for)."""
    import unicodedata

    text = unicodedata.normalize("NFKD", unicodedata.normalize("NFKC", name))
    return "".join(LOOK_ALIKES.get(char, char) for char in text
                   if not unicodedata.category(char).startswith("M") and ord(char) not in _INVISIBLE).casefold()

MOST_QUOTED = 300
"""Characters of a message kept where it may quote what a student wrote: nbgrader's refusal of a
notebook quotes the value it refused whole (a cell's `points`, 15 MB of it)."""
_SPACE = re.compile(r"\s*")


def clipped(text: str, most: int = MOST_QUOTED) -> str:
    """The first line of a message, at most `most` characters of it, then "…" where it goes on;
    read no further than that, however long the message."""
    start = _SPACE.match(text).end()
    head = text[start:start + most + 1]
    line = head.splitlines()[0].rstrip() if head else ""
    return line if len(line) <= most else line[:most] + "…"


def spreadsheet_cell(text: str, name: bool = False) -> str:
    """`text` as a CSV cell that a spreadsheet shows as text, never runs as a formula, and that a
    terminal shows as it is: control characters and direction marks (a student's file name may
    hold them) are escaped, as in the listing on stdout; a submission's `name` as `printable_name` shows it."""
    text = printable_name(text) if name else printable(text, one_line=True)
    # spaces before the sign too: some spreadsheets drop them as they read a cell
    return "'" + text if text.lstrip(" ")[:1] in ("=", "+", "-", "@") else text


# Quoted wherever a reader might split: at a comma, at a semicolon (the separator spreadsheets
# use where the comma is the decimal mark), at a tab or a line break of any kind.
_SPLITS = (",", ";", '"', "\t", "\r", "\n")


def spreadsheet_csv(rows: list[list[str]]) -> str:
    """Rows of text as CSV that any spreadsheet reads cell for cell: a cell holding a separator,
    a quote or a line break is quoted whole (csv's own quoting misses a carriage return when lines
    end in a newline, and every semicolon), so a student's file name stays one cell."""
    return "".join(_csv_line(row) for row in rows)


def _csv_line(row: list[str]) -> str:
    def cell(text: str) -> str:
        return '"' + text.replace('"', '""') + '"' if any(mark in text for mark in _SPLITS) else text

    return ",".join(cell(text) for text in row) + "\n"


def to_csv(results: Iterable[SubmissionResult], skipped: list[tuple[str, str]] = ()) -> str:
    """One row per graded submission, then one per file found and not graded (empty scores, the
    reason in `skipped`)."""
    return "".join(csv_lines(results, skipped))


def csv_lines(results: Iterable[SubmissionResult], skipped: list[tuple[str, str]] = ()) -> Iterator[str]:
    """`to_csv`, a line at a time: a class's summary is written as its results are read."""
    yield _csv_line(["submission", "score", "max_score"] + [step.id for step in STEPS]
                    + ["diagnoses", "error", "skipped"])
    for result in results:
        codes = sorted({code for step in result.steps for code in step.diagnoses})
        yield _csv_line([spreadsheet_cell(result.submission, name=True), f"{result.score:g}", f"{result.max_score:g}"]
                        + [f"{step.score:g}" for step in result.steps]
                        + [" ".join(codes), spreadsheet_cell(result.error or ""), ""])
    for name, reason in skipped:
        yield _csv_line([spreadsheet_cell(name, name=True), "", ""] + [""] * len(STEPS) + ["", "", spreadsheet_cell(reason)])


_COLOURS = {"passed": "32", "partial": "33", "failed": "31", "not_implemented": "90", "error": "35", "timeout": "35"}


def to_text(result: SubmissionResult, colour: bool = False) -> str:
    def paint(text: str, status: str) -> str:
        return f"\x1b[{_COLOURS[status]}m{text}\x1b[0m" if colour else text

    width = max(len(step.id) for step in result.steps)
    lines = [f"{printable_name(result.submission)}: {result.score:g} / {result.max_score:g}", ""]
    lines.append(f"  {'step':<{width}}  {'score':>11}  status")
    for step in result.steps:
        score = f"{step.score:g} / {step.max_score:g}"
        shown = f"carried from {step.carried_from}" if step.carried_from else step.status
        lines.append(f"  {step.id:<{width}}  {score:>11}  {paint(shown, step.status)}"
                     + (f"  [{', '.join(step.diagnoses)}]" if step.diagnoses else ""))
    if result.answers is not None:
        missing = [name for name, ok in result.answers.items() if not ok]
        lines.append("")
        lines.append("Written answers: " + ("all present (graded by a person)." if not missing
                                            else "still empty: " + printable(", ".join(missing), one_line=True) + "."))
    failing = [step for step in result.steps if step.status != "passed"]
    shared = {step.feedback.partition("\n")[2] for step in failing}
    if len(failing) > 1 and len(shared) == 1 and shared != {""}:  # one reason for all (the module never ran)
        lines += ["", "Feedback", "", paint("── every step ", failing[0].status)
                  + f"({sum(step.score for step in failing):g} / {sum(step.max_score for step in failing):g})"]
        lines.extend("  " + line for line in printable(shared.pop()).splitlines())
    elif failing:
        lines.append("")
        lines.append("Feedback")
        for step in failing:
            lines.append("")
            lines.append(paint(f"── {step.id} ", step.status) + f"({step.score:g} / {step.max_score:g})")
            lines.extend("  " + line for line in printable(step.feedback).splitlines())
    lines.append("")
    lines.append(f"Grading seed {result.seed} (rerun with --seed {result.seed}); isolation: {result.isolation}.")
    return "\n".join(lines) + "\n"
