"""The held-out mistakes (heldout.json), read once: name -> the function changed, what changed, the module.

Each entry is the reference solution with one change in one function, written from the chapter,
the contract and the stubs, without the hidden graders' lists of slips in view. The file is frozen:
entries are never edited to suit the grader.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class HeldOut:
    function: str
    mistake: str
    source: str

    def text(self) -> str:
        return self.source


HELDOUT: dict[str, HeldOut] = {
    entry["name"]: HeldOut(entry["function"], entry["mistake"], entry["source"])
    for entry in json.loads((Path(__file__).with_name("heldout.json")).read_text())
}
