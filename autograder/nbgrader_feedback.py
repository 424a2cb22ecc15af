"""What people read of a graded notebook: the course's own nbgrader preprocessor and template.

A check cell of the course's source notebook carries a hidden line that imports the grading hook,
and under `nbgrader autograde` it echoes the step's score as its value (nbgrader's partial credit).
Neither is for a reader. `ReaderView` removes both once nbgrader has taken the score, notes the
in-kernel scores in the notebook's metadata (for a reader only: `qkv-grade --nbgrader` compares
with the gradebook, never with a notebook) and gives each check cell its step's title.
`configure` puts it into the course's `nbgrader_config.py`: into autograde right after
SaveAutoGrades, so formgrader and the feedback both read the clean notebook, and into
generate_feedback, with the `qkv_feedback` template beside this module (step names in the
contents, ungraded answers marked as such), and into formgrader's grading view, with the
`qkv_formgrade` template (nbgrader's `formgrade`; its folder holds only a conf.json). Both
templates add `WrapLines`, the styles that wrap every line of code and output instead of cutting
it off.

Everything in a submitted notebook is the student's, and so is every output its kernel made: a
page shows it as text, a picture that is a checked PNG, or markdown rendered and then cleaned to
plain formatting (`CleanMarkdown`, which formgrader's exporter and the feedback's both use), so
no script, event handler, frame or SVG of a student's reaches a grader's or a student's browser.
What a page costs to render is bounded the same way: markdown and code past their budgets (per
cell and per page, counted by `reader_view`) are shown as their text, neither rendered nor
highlighted, and a picture is written out for each reference to it only within the pictures a cell
and a page may show (counted by `_ReaderRenderer` as it renders), past which it is a note.
"""
from __future__ import annotations

import base64
import binascii
import html
import itertools
import re
import struct
import zlib
from pathlib import Path

import bleach
from jinja2 import pass_context
from nbconvert import HTMLExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.markdown_mistune import MISTUNE_V3, IPythonRenderer, MarkdownWithMath
from nbconvert.preprocessors import Preprocessor
from nbgrader import utils
from nbgrader.preprocessors import NbGraderPreprocessor
from traitlets.config import LoggingConfigurable

from .steps import ANSWERS, STEPS
from .submission import cell_grade_id

TEMPLATES = Path(__file__).resolve().parent / "nbgrader_templates"
TEMPLATE = "qkv_feedback"
FORMGRADE_TEMPLATE = "qkv_formgrade"
_BEGIN_HIDDEN = re.compile(r"[ \t]*### BEGIN HIDDEN TESTS\s*")
_END_HIDDEN = re.compile(r"[ \t]*### END HIDDEN TESTS[ \t]*")


def without_hidden(source: str) -> str:
    """`source` without its hidden-test regions (a `### BEGIN HIDDEN TESTS` line, through the next
    `### END HIDDEN TESTS` line), read line by line: a cell is the student's too, and a pattern
    matching each region would read from every unclosed BEGIN to the end, quadratic in the cell."""
    lines = source.split("\n")
    ends = [i for i, line in enumerate(lines) if _END_HIDDEN.fullmatch(line)]
    kept, i, later = [], 0, 0  # later: the first END line not yet passed
    while i < len(lines):
        if _BEGIN_HIDDEN.fullmatch(lines[i]):
            while later < len(ends) and ends[later] <= i:
                later += 1
            if later < len(ends):
                i = ends[later] + 1  # the region and its END line go, with the END line's newline
                if i == len(lines) and kept:
                    kept.append("")  # ending the text, it had none: the newline before BEGIN stays
                continue
        kept.append(lines[i])
        i += 1
    return "\n".join(kept)
CHECK_TITLES = {f"check-{step.id}": f"Step {number}: {step.title} ({step.id})"
                for number, step in enumerate(STEPS, 1)}
STEP_OF_CHECK = {f"check-{step.id}": step.id for step in STEPS}
ANSWER_TITLES = {f"answer-{name}": f"Exercise {number}: written answer" for number, (name, _) in enumerate(ANSWERS, 1)}
PLOT_CELL = "plot"  # the heatmap cell's id in the release
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_MAX_BYTES = 4 * 1024 * 1024  # a heatmap is some tens of kilobytes
PNG_KEPT_CHUNKS = {b"IHDR", b"PLTE", b"IDAT", b"IEND", b"tRNS"}  # pixels only: no text chunks
# What a cleaned answer may hold: the formatting markdown makes, and nothing that runs.
MARKDOWN_TAGS = {"p", "h1", "h2", "h3", "h4", "h5", "h6", "a", "img", "em", "strong", "b", "i", "u",
                 "s", "del", "code", "pre", "kbd", "blockquote", "ul", "ol", "li", "dl", "dt", "dd",
                 "hr", "br", "table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "span",
                 "div", "sup", "sub", "small", "abbr"}
PICTURE_URL = re.compile(r"^data:image/(png|jpeg|gif);base64,", re.IGNORECASE)
# A line of code or output wraps instead of running past the page's right edge, where nbgrader's
# pages (bootstrap's `pre`, classic's scrolling output areas) cut it off.
WRAP_CSS = """\
div.output_area pre, div.input_area pre, div.output_subarea, div.text_cell_render pre {
  white-space: pre-wrap;
  word-break: normal;  /* bootstrap's pre breaks anywhere ("eac h row") */
  overflow-wrap: break-word;  /* a long token may break; a word never breaks where a space could */
  overflow-x: visible;
}
div.output_area img { max-width: 100%; height: auto; }
"""


def clean_png(data) -> str | None:
    """`data` (an output's base64 image/png) as a PNG of its pixels alone, base64 again; None when
    it is not a whole, well-formed PNG (every chunk's CRC right, IHDR first, IEND last)."""
    if not isinstance(data, str) or len(data) > PNG_MAX_BYTES * 4 // 3 + 4:
        return None
    try:
        raw = base64.b64decode("".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        return None
    if not raw.startswith(PNG_SIGNATURE):
        return None
    kept, at, kinds = [PNG_SIGNATURE], len(PNG_SIGNATURE), []
    while at + 12 <= len(raw):
        length, kind = struct.unpack(">I4s", raw[at:at + 8])
        end = at + 12 + length
        if end > len(raw) or not kind.isalpha():
            return None
        body = raw[at + 8:end - 4]
        if struct.unpack(">I", raw[end - 4:end])[0] != zlib.crc32(kind + body):
            return None
        kinds.append(kind)
        if kind in PNG_KEPT_CHUNKS:
            kept.append(raw[at:end])
        at = end
        if kind == b"IEND":
            break
    if at != len(raw) or not kinds or kinds[0] != b"IHDR" or kinds[-1] != b"IEND" or b"IDAT" not in kinds:
        return None
    return base64.b64encode(b"".join(kept)).decode("ascii")


def pictures(outputs) -> list:
    """The checked pictures among a cell's outputs, each alone in an output of its own."""
    from nbformat import from_dict

    kept = []
    for output in outputs or []:
        data = output.get("data") if isinstance(output, dict) else None
        picture = clean_png(data.get("image/png")) if isinstance(data, dict) else None
        if picture is not None and output.get("output_type") in ("display_data", "execute_result"):
            kept.append(from_dict({"output_type": "display_data", "metadata": {},
                                   "data": {"image/png": picture}}))
    return kept


ATTACHMENT = "attachment:"  # how markdown refers to a picture its cell carries
MOST_ATTACHMENTS = 20  # looked at per cell, each costing a search of the cell's text
PICTURE_SIGNATURES = {"image/jpeg": (b"\xff\xd8\xff",), "image/gif": (b"GIF87a", b"GIF89a")}


def attached_picture(bundle) -> dict | None:
    """An attachment's bundle as a page may show it: its picture alone, a PNG of its pixels
    (`clean_png`) or else a JPEG or a GIF (base64 of bytes that start as one does); None where it
    holds no such picture (nbconvert fails on an empty bundle, and shows any other type it finds)."""
    if not isinstance(bundle, dict):
        return None
    png = clean_png(bundle.get("image/png"))
    if png is not None:
        return {"image/png": png}
    for kind, signatures in PICTURE_SIGNATURES.items():
        data = bundle.get(kind)
        if not isinstance(data, str) or len(data) > PNG_MAX_BYTES * 4 // 3 + 4:
            continue
        try:
            raw = base64.b64decode("".join(data.split()), validate=True)
        except (binascii.Error, ValueError):
            continue
        if raw.startswith(signatures):
            return {kind: base64.b64encode(raw).decode("ascii")}
    return None


def kept_attachments(source: str, attachments) -> dict:
    """Of a markdown cell's attachments, those a page shows: each one its text refers to
    (`attachment:NAME`), as `attached_picture` keeps it; of the first MOST_ATTACHMENTS only."""
    if not isinstance(attachments, dict):
        return {}
    kept = {}
    for name, bundle in itertools.islice(attachments.items(), MOST_ATTACHMENTS):
        if isinstance(name, str) and ATTACHMENT + name in source:
            picture = attached_picture(bundle)
            if picture is not None:
                kept[name] = picture
    return kept


def plain_outputs(outputs) -> list:
    """A kernel's outputs as a reader may see them: streams and errors (shown as text), checked
    pictures and plain text; no HTML, SVG, JavaScript or other rich output."""
    from nbformat import from_dict

    kept = []
    for output in outputs or []:
        kind = output.get("output_type")
        if kind in ("stream", "error"):
            kept.append(output)
        elif kind in ("display_data", "execute_result"):
            data = output.get("data") if isinstance(output.get("data"), dict) else {}
            shown = {"text/plain": data["text/plain"]} if isinstance(data.get("text/plain"), str) else {}
            picture = clean_png(data.get("image/png"))
            if picture is not None:
                shown["image/png"] = picture
            if shown:
                kept.append(from_dict({**output, "metadata": {}, "data": shown}))
    return kept


def forget_reader_marks(notebook) -> None:
    """Remove the marks this module puts on a notebook, wherever a submission brought its own."""
    metadata = notebook.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("qkv", None)
    for cell in notebook.get("cells", []):
        if isinstance(cell.get("metadata"), dict):
            for mark in ("qkv_title", "qkv_pending", PLAIN_CODE):
                cell.metadata.pop(mark, None)


def reader_view(notebook) -> dict[str, float]:
    """Make `notebook` what a reader should see, in place; returns the in-kernel step scores it
    found (nbgrader's reading of each check cell) before taking the scores out."""
    scores = {}
    forget_reader_marks(notebook)
    rendered = [0, 0, 0]  # characters, tags and lines, and inline marks of the markdown rendered so far
    highlighted = 0  # characters of code highlighted so far
    answered = set()  # the written answers met: each renders whatever came before it, once
    for cell in notebook.cells:
        if cell.cell_type != "code":
            attachments = kept_attachments(cell.source, cell.get("attachments"))
            if attachments and cell.cell_type == "markdown":
                cell.attachments = attachments
            else:
                cell.pop("attachments", None)
            answer = cell_grade_id(cell) in ANSWER_TITLES
            if answer:
                cell.metadata["qkv_title"] = ANSWER_TITLES[cell_grade_id(cell)]
            if answer and cell_grade_id(cell) not in answered:
                answered.add(cell_grade_id(cell))  # within a cell's budgets (CleanMarkdown), it is rendered
            elif answer or cell.cell_type == "markdown":  # a second cell claiming an answer's place counts
                rendered[0] += len(cell.source)
                rendered[1] += _elements(cell.source)
                rendered[2] += _inline_marks(cell.source)
                if (rendered[0] > MOST_PAGE_MARKDOWN or rendered[1] > MOST_PAGE_TAGS
                        or rendered[2] > MOST_PAGE_INLINE) and not FENCED.fullmatch(cell.source):
                    cell.source = shown_as_text(cell.source)  # past the page's budget: its text, as it is
            continue
        grade_id = cell_grade_id(cell)
        outputs = cell.get("outputs", [])
        if grade_id in STEP_OF_CHECK:
            cell.source = without_hidden(cell.source)
            if any(output.get("output_type") == "execute_result" for output in outputs):
                score, _ = utils.determine_grade(cell)
                scores[STEP_OF_CHECK[grade_id]] = float(score) if score is not None else 0.0
            outputs = [output for output in outputs if output.get("output_type") != "execute_result"]
            cell.execution_count = None
            cell.metadata["qkv_title"] = CHECK_TITLES[grade_id]
        cell.outputs = plain_outputs(outputs)
        if within_code_budget(cell.source) and highlighted + len(cell.source) <= MOST_PAGE_CODE:
            highlighted += len(cell.source)
        else:  # past a cell's or the page's budget: its text, as it is
            cell.metadata[PLAIN_CODE] = True
    return scores


class ReaderView(NbGraderPreprocessor):
    """nbgrader's step for `reader_view`; also marks written answers no person has graded yet."""

    def preprocess(self, nb, resources):
        scores = reader_view(nb)
        if scores:  # shown to a reader only; nothing reads it back as a score
            nb.metadata["qkv"] = {"in_kernel": scores}
        pending = _ungraded(resources.get("nbgrader", {}))
        for cell in nb.cells:
            if cell_grade_id(cell) in pending:
                cell.metadata["qkv_pending"] = True
        return nb, resources


def _ungraded(info: dict) -> set[str]:
    """The grade ids of the notebook's cells that still wait for a person (in generate_feedback)."""
    if not {"db_url", "assignment", "student", "notebook"} <= set(info):
        return set()
    from nbgrader.api import Gradebook

    with Gradebook(info["db_url"]) as gradebook:
        submission = gradebook.find_submission_notebook(info["notebook"], info["assignment"],
                                                        info["student"])
        return {grade.name for grade in submission.grades if grade.needs_manual_grade}


class WrapLines(Preprocessor):
    """Adds WRAP_CSS to the styles a page inlines in its head (`resources.inlining.css`, which
    formgrader's grading view and nbgrader's feedback page both write out).

    Each of the course's templates lists it in its conf.json, so that it runs after the
    CSSHTMLHeaderPreprocessor of nbconvert's classic template, which starts those styles afresh.
    """

    def preprocess(self, nb, resources):
        resources.setdefault("inlining", {}).setdefault("css", []).append(WRAP_CSS)
        return nb, resources


def _link_allowed(tag: str, name: str, value: str) -> bool:
    """bleach's attribute test: a title, links that load no script (bleach itself then checks each
    URL's protocol), and pictures the page holds itself.

    Nothing that names or dresses an element of the page: with an `id` (or a heading's anchor) a
    student's markup would come before a score's own box, where formgrader looks a grade's inputs
    up by id, and with a `class` it would wear the page's own banners. No picture from elsewhere
    either: fetching it would tell its author when and where a grader reads the page."""
    if name == "title":
        return True
    url = re.sub(r"[\s\x00-\x20]", "", html.unescape(value)).lower()
    if tag == "a" and name == "href":
        # `files/javascript:…` is a relative link to bleach; nbconvert's `strip_files_prefix`, were it
        # applied after cleaning, would make it a script (it is a no-op here, `unchanged`)
        bare = re.sub(r"^(/|\\)*files/", "", url)
        return not url.startswith("data:") and (bare == url or not re.match(r"[a-z][a-z0-9+.-]*:", bare))
    if tag == "img" and name == "src":
        return bool(PICTURE_URL.match(url))
    return tag == "img" and name in ("alt", "width", "height") or tag in ("td", "th") and name == "align"


# A code cell past these is shown as its text, escaped, never highlighted: pygments' Python lexer
# reads some lines in time growing with the square of their length (`1.1.1…`: 46 s for one line of
# 100 000 characters), and formgrader renders a page in the Jupyter server's only thread. On lines
# of MOST_CODE_LINE such characters it takes some 12 µs a character, on ordinary code 5: a page of
# MOST_PAGE_CODE characters costs about a second at worst. The release's code is some 8 000
# characters, its longest line about 100.
MOST_CODE = 20_000
MOST_CODE_LINE = 1_000
MOST_PAGE_CODE = 100_000
PLAIN_CODE = "qkv_plain"  # reader_view's mark on a code cell past a cell's or the page's budget


def within_code_budget(source: str) -> bool:
    """Whether a code cell is short enough to highlight: at most MOST_CODE characters, and at most
    MOST_CODE_LINE on any line (as pygments reads lines: a carriage return ends none here)."""
    return len(source) <= MOST_CODE and max(map(len, source.split("\n"))) <= MOST_CODE_LINE


class BoundedHighlight(Highlight2HTML):
    """The `highlight_code` filter of formgrader's and the feedback's pages: nbconvert's own, with
    the IPython 3 lexer whatever a notebook's or a cell's metadata names (a student picks no
    lexer), for a cell within the budgets for code that `reader_view` has not marked; any other
    cell is shown as its text, escaped, in the same frame."""

    def __call__(self, source, language=None, metadata=None):
        marked = isinstance(metadata, dict) and metadata.get(PLAIN_CODE)
        if not marked and within_code_budget(source):
            return super().__call__(source, "ipython3")
        return f'<div class=" highlight hl-ipython3"><pre>{html.escape(source)}</pre></div>'


class _ReaderRenderer(IPythonRenderer):
    """nbconvert's markdown renderer, less the highlighting of fenced code (pygments would spend
    seconds on a long line, and the cleaner drops every class it sets anyway), and writing out
    pictures only within the budgets of pictures."""

    def __init__(self, page_pictures: list[int], **options):
        super().__init__(**options)
        self.page_pictures = page_pictures  # the characters of pictures the page has written out so far
        self.cell_pictures = 0
        self.attached = {}  # an attachment's name -> its data URL, None where it holds no picture

    def block_code(self, code: str, info: str | None = None) -> str:
        return super(IPythonRenderer, self).block_code(code)  # mistune's: the code escaped, as it is

    def image(self, text: str, url: str, title: str | None = None) -> str:
        """A picture, counted against the cell's and the page's budgets of pictures before it is
        written out, and past them a note saying so; one the cell refers to but does not carry as a
        picture (nbconvert raises on it) is its alternative text."""
        if not MISTUNE_V3:  # mistune 2 hands the two the other way round
            text, url = url, text
        if url.startswith(ATTACHMENT):
            url = self._attached(url[len(ATTACHMENT):])
            if url is None:
                return text
        why = ("too large to show" if len(url) > MOST_CELL_PICTURES
               else "the cell's pictures are too large in all" if self.cell_pictures + len(url) > MOST_CELL_PICTURES
               else "the page's pictures are too large in all" if self.page_pictures[0] + len(url) > MOST_PAGE_PICTURES
               else None)
        if why:
            return f"{text} [picture left out: {why}]".lstrip()
        self.cell_pictures += len(url)
        self.page_pictures[0] += len(url)
        return super().image(*((text, url) if MISTUNE_V3 else (url, text)), title)

    def _attached(self, name: str) -> str | None:
        """The data URL of the picture the cell carries as `name` (`attached_picture`), checked once
        however often the cell refers to it; None where it carries none."""
        if name not in self.attached:
            attachments = self.attachments if isinstance(self.attachments, dict) else {}
            picture = attached_picture(attachments.get(name))
            self.attached[name] = (None if picture is None
                                   else "data:{};base64,{}".format(*next(iter(picture.items()))))
        return self.attached[name]


PAGE_PICTURES = "qkv_pictures"  # in a page's resources: [the characters of pictures written out so far]


def _markdown_html(exporter, context, source: str) -> str:
    """What the exporter's own markdown2html makes of `source` (its settings, the cell's
    attachments), rendered by `_ReaderRenderer` and counting its pictures in the page's resources.

    It embeds no file, whatever the exporter's `embed_images`: nbconvert would read a file beside
    the notebook, which is the student's, again for each reference to it, past every budget here."""
    cell = context.get("cell", {}) or {}
    resources = context.get("resources")
    page_pictures = resources.setdefault(PAGE_PICTURES, [0]) if isinstance(resources, dict) else [0]
    renderer = _ReaderRenderer(
        page_pictures, escape=False, attachments=cell.get("attachments", {}), embed_images=False,
        anchor_link_text=exporter.anchor_link_text, exclude_anchor_links=exporter.exclude_anchor_links,
        **exporter.lexer_options)
    return MarkdownWithMath(renderer=renderer).render(source)


MARKDOWN_CLEANER = bleach.Cleaner(tags=MARKDOWN_TAGS, attributes=_link_allowed,
                                  protocols=["http", "https", "mailto", "data"], strip_comments=True)


@pass_context  # jinja hands each call its context, as it does nbconvert's own markdown2html
class CleanMarkdown(LoggingConfigurable):
    """The `markdown2html` filter of formgrader's and the feedback's pages: the exporter's own
    rendering, then cleaned to MARKDOWN_TAGS (any other tag is shown as text, escaped).

    nbgrader's templates render markdown cells, the written answers included, without nbconvert's
    `sanitize_html` cleaning; a filter of the same name reaches every place they render markdown.
    """

    def __call__(self, context, source):
        fenced = FENCED.fullmatch(source)
        if fenced:  # text shown as it is (reader_view's, past a page's budget): no cleaner needed
            return f"<pre><code>{html.escape(source[len(fenced.group(1)) + 1:-len(fenced.group(1)) - 1])}</code></pre>"
        if len(source) > MOST_MARKDOWN or _elements(source) > MOST_TAGS or _inline_marks(source) > MOST_INLINE \
                or any(source.count(opener) > MOST_MATH for opener in MATH_OPENERS):
            # nbconvert's search for maths starts again at every opener left unclosed: shown as text
            return f"<pre>{html.escape(source)}</pre>"
        try:
            rendered = _markdown_html(self.parent, context, source)
        except Exception:  # whatever a student's markdown makes the renderer raise: its text, not a failed page
            return f"<pre>{html.escape(source)}</pre>"
        if len(rendered) > MOST_RENDERED or rendered.count("<") > MOST_RENDERED_TAGS:
            # what the cleaner would take a second to read (a table of thousands of cells, quotes
            # written out as entities): whatever made it, the cell's text
            return f"<pre>{html.escape(source)}</pre>"
        return MARKDOWN_CLEANER.clean(rendered)


# A page's markdown cells, the written answers aside (one cell each), past these in all are shown
# as plain text: each within a cell's budgets may still cost a tenth of a second or more (thousands
# of tags for the cleaner to balance, or of emphasis marks for the renderer to pair), and a notebook
# may hold hundreds.
MOST_PAGE_MARKDOWN = 100_000
MOST_PAGE_TAGS = 2_000  # tags and lines (_elements): the release's own markdown holds some 230
MOST_PAGE_INLINE = 5_000  # inline marks (_inline_marks): the release's own markdown holds some 600


FENCED = re.compile(r"(~{3,})\n.*\n\1", re.DOTALL)  # what shown_as_text makes (once is enough)


def shown_as_text(source: str) -> str:
    """`source` as markdown that shows its text as it is: a fence longer than any run of tildes in it."""
    fence = "~" * max(3, 1 + max((len(run) for run in re.findall(r"~+", source)), default=0))
    return f"{fence}\n{source}\n{fence}"


# A markdown cell past these is shown as plain text: rendering it costs the square of its length
# where its maths is left open (seconds at 24 KB, minutes at 300 KB), and formgrader renders a page
# in the Jupyter server's only thread. A written answer is a few sentences.
MOST_MARKDOWN = 20_000
MOST_MATH = 100
MOST_TAGS = 400  # tags and lines (_elements): nested thousands deep, tags cost the cleaner seconds
# inline marks (_inline_marks): the renderer pairs emphasis and code marks in time that grows faster
# than their number (20 000 of `*` and a backtick in turn cost it 1.4 s), and each `|` of a table
# or `~~` of a strikethrough is a tag; the release's cells hold 67 at most
MOST_INLINE = 1_000
# What a cell rendered may come to before the cleaner reads it: the cleaner's time grows with the
# tags and the text (a 20 000-character table made 32 000 tags, 0.8 s; 20 000 quotes, 120 000
# characters of entities, 0.4 s). The release's cells render to 1.5 times their text and 60 tags at most.
MOST_RENDERED = 3 * MOST_MARKDOWN
MOST_RENDERED_TAGS = 1_500
# The characters of pictures (each one's address, a data: URL written out whole) a cell and a page
# may show, each reference counted: a reference is the whole picture again, however it names it
# (the same attachment, another name for the same picture, a definition used again), and 450
# references to an attachment of 4 MiB would be 2.4 GB for the renderer to write out, to be thrown
# away. A cell past MOST_RENDERED is shown as its text anyway; the cleaner reads a page's pictures
# in a tenth of a second.
MOST_CELL_PICTURES = MOST_RENDERED
MOST_PAGE_PICTURES = 1_000_000
MATH_OPENERS = ("\\begin{", "\\(", "\\[", "$$")


def _elements(source: str) -> int:
    """How many elements a cell's markdown may make, at most about: its tags, and a heading or an
    item per line (`#` lines alone make thousands of headings, each costing the renderer and the
    cleaner as much as a tag). Lines as Python splits them, which ends more of them than the
    renderer does: a lone carriage return ends one for the renderer too, and `#\r` lines were
    thousands of headings counted as none."""
    return source.count("<") + len(source.splitlines())


def _inline_marks(source: str) -> int:
    """How many marks of emphasis, code, links and tables a cell's markdown holds: the characters
    the renderer tries to pair with one another (`*`, `_`, `~`, backticks and brackets), and the
    pipes that make a table's cells."""
    return sum(source.count(mark) for mark in "*_`[]|~")


class FeedbackExporter(HTMLExporter):
    """generate_feedback's exporter, so that the feedback template is its alone: formgrader
    renders with HTMLExporter's settings, whose template is `qkv_formgrade`."""


def unchanged(text: str) -> str:
    """Stands in for nbconvert's `strip_files_prefix`, which the templates apply to markdown already
    cleaned: it rewrites `href="files/…"` as `href="…"`, and so would turn a link a student wrote to
    `files/javascript:…`, harmless when cleaned, into a script. The pages link to no file of the
    course (their pictures are data: URLs), so nothing needs the prefix taken off."""
    return text


def configure(c) -> None:
    """Set the course's nbgrader configuration `c` to use the reader's view and templates, and to
    write every feedback page afresh."""
    import nbgrader
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import GetGrades, SaveAutoGrades

    steps = list(Autograde.class_traits()["autograde_preprocessors"].default())
    steps.insert(steps.index(SaveAutoGrades) + 1, ReaderView)
    c.Autograde.autograde_preprocessors = steps
    c.GenerateFeedback.preprocessors = [GetGrades, ReaderView, CSSHTMLHeaderPreprocessor]
    formgrader = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates"
    # nbgrader's templates, then the course's (whose base/ holds what both of its pages include:
    # nbconvert looks in a folder named for each template the page extends, `base` the last)
    basedirs = [str(formgrader), str(TEMPLATES)]
    c.GenerateFeedback.exporter_class = FeedbackExporter
    c.FeedbackExporter.template_name = TEMPLATE
    c.FeedbackExporter.template_file = f"{TEMPLATE}.html.j2"  # it extends nbgrader's index.html.j2
    c.FeedbackExporter.extra_template_basedirs = basedirs
    # generate_feedback skips a page it finds newer than the submission's timestamp.txt, but the
    # page shows the gradebook too: a written answer graded in formgrader, or a rerun of
    # `qkv-grade --nbgrader`, leaves that timestamp as it was. Each run writes every page again.
    c.GenerateFeedback.force = True
    # Formgrader renders a submission with a plain HTMLExporter made from this configuration.
    c.HTMLExporter.template_name = FORMGRADE_TEMPLATE
    c.HTMLExporter.template_file = f"{FORMGRADE_TEMPLATE}.html.j2"  # it extends nbgrader's index.html.j2
    c.HTMLExporter.extra_template_basedirs = basedirs
    # A student's markdown and outputs are shown cleaned, on both pages (FeedbackExporter is an
    # HTMLExporter): nbconvert's sanitize_html for outputs, CleanMarkdown for markdown cells.
    c.HTMLExporter.sanitize_html = True
    # Code is highlighted within the budgets for code (BoundedHighlight), and shown as text past them.
    c.HTMLExporter.filters = {"markdown2html": f"{__name__}.CleanMarkdown",
                              "highlight_code": f"{__name__}.BoundedHighlight",
                              "strip_files_prefix": f"{__name__}.unchanged"}
