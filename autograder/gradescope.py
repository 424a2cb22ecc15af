"""Gradescope: the autograder bundle, and what runs inside it for each submission.

`build()` writes the zip that Gradescope's Configure Autograder page takes. Its root holds
`setup.sh` and `run_autograder`, beside the package source, the pinned requirements and
`gradescope.json` (the seed, the grading key, time limit and visibility chosen when it was built). Gradescope
unpacks the zip to /autograder/source and runs setup.sh once, as root, while it builds the image;
then, for every submission, run_autograder, which calls `main()` here. `main()` grades the file in
/autograder/submission and always leaves a valid /autograder/results/results.json, even when there
is nothing to grade or the grader itself fails.

Every submission is graded with the bundle's seed, so all students meet the same hidden cases and
"Regrade all submissions" reproduces every grade. The student code runs in the same sandbox as
`qkv-grade` (bubblewrap, as uid 65534, when it works in the container); where bubblewrap cannot
start there, grading goes on in a plain process and results.json's `extra_data` says so.

QKV_AUTOGRADER_ROOT stands in for /autograder (the tests use a temporary folder);
QKV_AUTOGRADER_PYTHON chooses the interpreter run_autograder uses instead of setup.sh's venv.
"""
from __future__ import annotations

import io
import json
import os
import sys
import traceback
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOT_VARIABLE = "QKV_AUTOGRADER_ROOT"
DEFAULT_ROOT = Path("/autograder")
CONFIG = "gradescope.json"
REQUIREMENTS = "requirements.txt"
DISTRIBUTION = "qkv-attention"
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")

# What the bundle carries of the repository: the grader, the reference and the data it reads.
# Not the student release, the tests or the sample class.
SOURCE_PARTS = ("pyproject.toml", "autograder", "solutions", "data/part-iv", "data/derived-edits.json",
                "data/example-values.npz",
                "data/results.schema.json", "data/gradescope-results.schema.json")

# What the student gets whenever the grader, not the submission, is at fault.
PLACEHOLDER = {"score": 0.0, "output": "The autograder could not grade this submission because of a problem "
               "on the course's side, not in your code. Your instructor can see the details and will regrade it.",
               "output_format": "text", "stdout_visibility": "hidden", "tests": []}


# ------------------------------------------------------------------ building the bundle ----------


def pinned_requirements() -> list[str]:
    """`name==version` for every distribution the package needs at run time, as installed here.

    Walks the installed package's own requirements (not its extras) and theirs in turn, so the
    container gets exactly the versions this grader was tested with.
    """
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    try:
        roots = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        raise BundleError(f"the {DISTRIBUTION} package is not installed here (pip install -e .), "
                          "so its requirements cannot be pinned") from None
    pins: dict[str, str] = {}
    todo = [(text, "") for text in roots]
    done: set[tuple[str, str]] = set()
    while todo:
        text, extra = todo.pop()
        requirement = Requirement(text)
        if requirement.marker and not requirement.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(requirement.name)
        for wanted in ("", *sorted(requirement.extras)):
            if (name, wanted) in done:
                continue
            done.add((name, wanted))
            try:
                distribution = metadata.distribution(requirement.name)
            except metadata.PackageNotFoundError:
                raise BundleError(f"{requirement.name}, which {DISTRIBUTION} needs, is not installed") from None
            pins[name] = distribution.version
            todo.extend((child, wanted) for child in distribution.requires or [])
    return [f"{name}=={version}" for name, version in sorted(pins.items())]


def python_minimum(pins: list[str]) -> str:
    """The oldest Python 3 release that the package and every pinned distribution support."""
    from importlib import metadata

    from packaging.specifiers import SpecifierSet

    specifiers = SpecifierSet(metadata.metadata(DISTRIBUTION).get("Requires-Python") or "")
    for pin in pins:
        specifiers &= SpecifierSet(metadata.metadata(pin.split("==")[0]).get("Requires-Python") or "")
    for minor in range(8, 40):
        if specifiers.contains(f"3.{minor}.0", prereleases=True):
            return f"3.{minor}"
    raise BundleError(f"no Python 3 release satisfies every pinned requirement ({specifiers})")


class BundleError(Exception):
    """The bundle cannot be built; the message says why in one line."""


def _source_files() -> list[tuple[str, Path]]:
    files = []
    for part in SOURCE_PARTS:
        path = REPO / part
        if path.is_file():
            files.append((_in_bundle(part), path))
            continue
        if not path.is_dir():
            raise BundleError(f"{path}: missing from the package source")
        for item in sorted(path.rglob("*")):
            relative = item.relative_to(REPO)
            if item.is_file() and not any(p.startswith(".") or p == "__pycache__" for p in relative.parts) \
                    and item.suffix != ".pyc":
                files.append((_in_bundle(relative.as_posix()), item))
    return files


def _in_bundle(name: str) -> str:
    """Where a file of the project goes in the bundle: the data files where the package reads them,
    in autograder/_data (which, in the project, links to data/), everything else where it is."""
    return "autograder/_data/" + name[len("data/"):] if name.startswith("data/") else name


def _add(archive: zipfile.ZipFile, name: str, data: bytes, executable: bool = False) -> None:
    # A fixed date and Unix modes: the same inputs give the same zip, and unzip keeps the scripts executable.
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.create_system = 3
    info.external_attr = (0o100755 if executable else 0o100644) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def build(target: Path, seed: int, timeout: float = 1.0, visibility: str = "visible",
          carry_forward: bool = True) -> dict:
    """Write the autograder zip to `target`; returns its configuration. `carry_forward`: whether a
    step whose only fault is an earlier step's verified mistake keeps its points."""
    if visibility not in VISIBILITIES:
        raise BundleError(f"visibility must be one of {', '.join(VISIBILITIES)}")
    pins = pinned_requirements()
    minimum = python_minimum(pins)
    from .keys import CaseKeyError, local_key

    try:
        key = local_key()  # the instructor's: a grade from Gradescope reproduces with `qkv-grade --seed`
    except CaseKeyError as exc:
        raise BundleError(str(exc)) from None
    config = {"seed": seed, "key": key.hex(), "call_timeout": timeout, "visibility": visibility,
              "carry_forward": carry_forward,
              "python_minimum": minimum,
              "built_with_python": ".".join(map(str, sys.version_info[:3]))}
    requirements = ("# Exactly the versions the grader was tested with when this bundle was built\n"
                    f"# (Python {config['built_with_python']}); setup.sh installs them into a venv.\n"
                    + "\n".join(pins) + "\n")
    from .store import changeable_above, write_atomically

    above = changeable_above(target)  # the bundle holds the grading key; uploaded, it grades the class
    if above is not None:
        raise BundleError(f"{target}: {above}, so they could read the bundle's key, or put their own bundle in its "
                          f"place for you to upload; write it inside folders only you (or root) can change")
    target.parent.mkdir(parents=True, exist_ok=True)
    packed = io.BytesIO()
    with zipfile.ZipFile(packed, "w") as archive:
        built = "%d.%d" % sys.version_info[:2]
        _add(archive, "setup.sh", SETUP_SH.replace("@PYTHON_MIN@", minimum).replace("@PYTHON_BUILT@", built).encode(),
             executable=True)
        _add(archive, "run_autograder", RUN_AUTOGRADER.replace("@PLACEHOLDER@", json.dumps(PLACEHOLDER)).encode(),
             executable=True)
        _add(archive, REQUIREMENTS, requirements.encode())
        _add(archive, CONFIG, (json.dumps(config, indent=2) + "\n").encode())
        for name, path in _source_files():
            _add(archive, name, path.read_bytes())
    write_atomically(target, packed.getvalue(), mode=0o600)  # a link at `target` is replaced, never written through
    return config


# ------------------------------------------------------------------ inside the container ---------


def find_submission(folder: Path) -> tuple[Path | None, str]:
    """The file to grade in Gradescope's submission folder, or None and a message for the student.

    `attention_head.py` (or `.ipynb`) is graded, at the top or in a folder (an uploaded zip or a
    repository); the released starter handed back untouched beside the file worked in (the module
    beside a notebook, or the notebook beside a module) is passed over.
    Where more than one such file remains (a draft and a final, a notebook and its own export), none
    is picked: which one the student meant is theirs to say, so they are asked to upload one.
    Otherwise a lone .py or .ipynb file is graded whatever its name.
    """
    from .results import printable
    from .submission import HELPERS, SUFFIXES, Cut, shown_name, untouched_starter, walk

    if not folder.is_dir():
        return None, "attention_head.py: nothing was submitted. Upload attention_head.py (or attention_head.ipynb)."
    # No symbolic link is followed: a linked folder is not looked into, and a linked file is a
    # candidate like any other, which reading then refuses (its target is never opened).
    found, cut = [], ""
    for entry, parts, problem in walk(folder):  # of an upload of thousands, only the first are looked at
        if isinstance(problem, Cut):
            cut = f" You submitted {problem}."
        elif (not problem and entry.name.endswith(SUFFIXES) and not entry.name.startswith((".", "test_"))
              and entry.name not in HELPERS):
            found.append((Path(entry.path), len(parts)))
    candidates = [path for path, _ in sorted(found, key=lambda item: (item[1], str(item[0])))]
    modules, notebooks = ([path for path in candidates if path.name == "attention_head" + suffix]
                          for suffix in SUFFIXES)
    # The starter handed back untouched beside the file worked in is no submission: the module
    # beside a notebook, or the notebook beside a module (the whole folder uploaded).
    if notebooks:
        modules = [path for path in modules if not untouched_starter(path, str(path.relative_to(folder)))]
    if modules:
        notebooks = [path for path in notebooks if not untouched_starter(path, str(path.relative_to(folder)))]
    named = modules + notebooks
    if len(named) == 1:
        return named[0], ""
    if named:
        names = ", ".join(printable(shown_name(str(path.relative_to(folder))), one_line=True) for path in named[:6])
        return None, (f"attention_head.py: more than one file could be your submission ({names}), and none was "
                      "picked for you. Submit again with only the one to grade.")
    if len(candidates) == 1:
        return candidates[0], ""
    if not candidates:
        return None, ("attention_head.py: not among the files you submitted. Upload attention_head.py "
                      "(or attention_head.ipynb), named exactly so." + cut)
    names = ", ".join(printable(shown_name(str(path.relative_to(folder))), one_line=True) for path in candidates[:6])
    return None, (f"attention_head.py: not among the files you submitted ({names}). Rename the one to "
                  "grade attention_head.py (or attention_head.ipynb), or submit it alone." + cut)


def grade(root: Path, log=print) -> dict:
    """Grade the submission under `root` (Gradescope's /autograder); returns the results.json document."""
    from . import results, sandbox
    from .grading import Grader
    from .keys import parse_key
    from .runner import Limits, Worker
    from .results import printable
    from .submission import SubmissionError, load, shown_name

    config = json.loads((root / "source" / CONFIG).read_text(encoding="utf-8"))
    seed, visibility = int(config["seed"]), config.get("visibility", "visible")
    key = parse_key(config["key"], CONFIG) if "key" in config else None
    limits = Limits(call_timeout=float(config.get("call_timeout", 1.0)))
    folder = root / "submission"
    path, problem = find_submission(folder)
    name = str(path.relative_to(folder)) if path else "attention_head.py"
    if path is not None:
        try:
            submission = load(path, name)
        except SubmissionError as exc:
            problem = str(exc).replace(shown_name(str(path)), shown_name(name))
    # as results and logs show it: a name that is not UTF-8 has its bytes escaped, and one (or a
    # message quoting it) that would act on a terminal, its controls
    name = printable(shown_name(name), one_line=True)
    if problem:
        problem = printable(problem, one_line=True)  # it may quote a name the student chose
        log(f"not graded: {problem}")
        result = results.unreadable(name, problem, seed, sandbox.isolation())
        return results.to_gradescope(result, visibility)

    grader = Grader(seed, limits, key, bool(config.get("carry_forward", True)))  # the strongest sandbox here, or SandboxUnavailable: never a silent downgrade
    with Worker(limits, grader.isolation) as worker:
        worker.start()
        result = grader.grade(worker, submission)
    codes = sorted({code for step in result.steps for code in step.diagnoses})
    log(f"{name}: {result.score:g} / {result.max_score:g}; seed {seed}; isolation {result.isolation}"
        + (f"; diagnoses: {', '.join(codes)}" if codes else ""))
    if result.isolation == "none":
        log("warning: the submission ran without a sandbox (QKV_SANDBOX=none)")
    return results.to_gradescope(result, visibility)


def main(argv: list[str] | None = None) -> int:
    """run_autograder's entry point: grade, and write results.json whatever happens."""
    from .console import speak_utf8

    speak_utf8()
    argv = sys.argv[1:] if argv is None else argv
    root = Path(argv[0] if argv else os.environ.get(ROOT_VARIABLE) or DEFAULT_ROOT)
    target = root / "results" / "results.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    status = 0
    from .results import dumps
    from .sandbox import SandboxUnavailable

    try:
        document = grade(root)
    except SandboxUnavailable as exc:  # refuse rather than grade unsealed; say what to enable
        print(f"not graded: {exc}")
        document, status = PLACEHOLDER, 1
    except Exception:  # the student still gets a results.json; the instructor gets the traceback
        traceback.print_exc(file=sys.stdout)
        document, status = PLACEHOLDER, 1
    partial = target.with_name(target.name + ".part")
    partial.write_text(dumps(document, indent=2) + "\n", encoding="utf-8",
                       errors="backslashreplace")  # a lone surrogate, should one slip through, as its escape
    os.replace(partial, target)
    return status


# ------------------------------------------------------------------ the two scripts --------------

SETUP_SH = r"""#!/usr/bin/env bash
# Gradescope runs this once, as root and with network access, while it builds the autograder image.
# It installs bubblewrap (the sandbox), a Python new enough for the pinned requirements, and a venv
# at /autograder/venv holding those requirements and this package. Set QKV_SETUP_SKIP_INSTALL=1 to
# only report what it would use, without installing anything.
set -euo pipefail

ROOT="${QKV_AUTOGRADER_ROOT:-/autograder}"
SOURCE="$ROOT/source"
VENV="$ROOT/venv"
PYTHON_MIN="@PYTHON_MIN@"  # the oldest Python that every pinned requirement supports
# The Python the bundle was built and tested with. It is preferred: the grader's stored values of
# the chapter's example (data/example-values.npz) hold for that version only; on another, the
# grader computes them for every submission, which costs time, never a grade.
PYTHON_BUILT="@PYTHON_BUILT@"
export DEBIAN_FRONTEND=noninteractive
say() { echo "setup.sh: $*"; }

updated=""
apt_install() {
    command -v apt-get >/dev/null || return 1
    if [ -z "$updated" ]; then apt-get update -qq || return 1; updated=1; fi
    apt-get install -y -qq --no-install-recommends "$@"
}

new_enough() {
    command -v "$1" >/dev/null 2>&1 &&
        "$1" -c "import sys; sys.exit(sys.version_info[:2] < tuple(map(int, '$PYTHON_MIN'.split('.'))))"
}

is_built() {
    "$1" -c "import sys; sys.exit('%d.%d' % sys.version_info[:2] != '$PYTHON_BUILT')" 2>/dev/null
}

pick_python() {
    for candidate in "python$PYTHON_BUILT" python3 python3.14 python3.13 python3.12 python3.11 python3.10; do
        if new_enough "$candidate"; then echo "$candidate"; return 0; fi
    done
    return 1
}

skip="${QKV_SETUP_SKIP_INSTALL:-0}"

# bubblewrap runs each submission as an unprivileged user with no view of this folder. Without it
# the grader still grades, in a plain process, and records that in every results.json.
if command -v bwrap >/dev/null; then
    say "bubblewrap: $(command -v bwrap)"
elif [ "$skip" = 1 ]; then
    say "bubblewrap: not installed (skipped)"
elif apt_install bubblewrap; then
    say "bubblewrap: installed"
else
    say "warning: bubblewrap could not be installed; submissions will be sealed with Landlock where the kernel offers it, and not graded where it offers no sandbox at all"
fi

python="$(pick_python || true)"
if [ -z "$python" ] && [ "$skip" != 1 ]; then
    # Ubuntu 22.04's python3 is 3.10; its universe repository carries newer ones.
    apt_install "python$PYTHON_MIN" "python$PYTHON_MIN-venv" || true
    python="$(pick_python || true)"
fi
if [ "$skip" != 1 ] && ! { [ -n "$python" ] && is_built "$python"; }; then
    # Ubuntu's universe repository carries other versions; not finding one costs only speed.
    apt_install "python$PYTHON_BUILT" "python$PYTHON_BUILT-venv" >/dev/null 2>&1 || true
    python="$(pick_python || true)"
fi
if [ -z "$python" ]; then
    say "error: no Python $PYTHON_MIN or newer found; choose a newer base image"
    exit 1
fi
say "python: $(command -v "$python") ($("$python" -V 2>&1))"
if ! is_built "$python"; then
    say "note: the bundle was built with Python $PYTHON_BUILT; on this one the grader works out the chapter's example values for every submission, a little slower"
fi

if [ "$skip" = 1 ]; then
    say "QKV_SETUP_SKIP_INSTALL=1: not creating $VENV"
    exit 0
fi

if ! "$python" -m venv "$VENV"; then
    version="$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
    apt_install "python$version-venv" python3-venv || true
    "$python" -m venv --clear "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --no-cache-dir -r "$SOURCE/requirements.txt"
# The package itself: its source stays here, next to the data files it reads.
site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$SOURCE" > "$site/qkv-attention.pth"
# The sandbox binds numpy from the venv and reads it as an unprivileged user.
chmod -R a+rX "$VENV"
chmod +x "$SOURCE/run_autograder"
"$VENV/bin/python" -c "import numpy, autograder.grading; print('setup.sh: numpy', numpy.__version__, 'ready')"
"""

RUN_AUTOGRADER = r"""#!/usr/bin/env bash
# Gradescope runs this as root for every submission. It grades /autograder/submission and writes
# /autograder/results/results.json; if even the grader cannot start, it still writes one, with
# score 0 and a message that the fault is the course's (stdout, shown only to instructors, has the rest).
ROOT="${QKV_AUTOGRADER_ROOT:-/autograder}"
SOURCE="$ROOT/source"
RESULTS="$ROOT/results"
python="${QKV_AUTOGRADER_PYTHON:-}"
if [ -z "$python" ]; then
    if [ -x "$ROOT/venv/bin/python" ]; then python="$ROOT/venv/bin/python"; else python=python3; fi
fi

mkdir -p "$RESULTS"
# Gradescope's advice: no other user may read the grader's source (the reference solutions) or the results.
chmod -R o= "$SOURCE" "$RESULTS" 2>/dev/null

cd "$SOURCE" && PYTHONPATH="$SOURCE" "$python" -m autograder.gradescope "$ROOT"
status=$?

if [ ! -s "$RESULTS/results.json" ]; then
    echo "run_autograder: the grader exited with status $status and wrote no results; writing a placeholder"
    cat > "$RESULTS/results.json" <<'EOF'
@PLACEHOLDER@
EOF
fi
exit 0
"""


if __name__ == "__main__":
    sys.exit(main())
