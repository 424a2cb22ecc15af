"""Every sentence of feedback is true of the submission it is about, checked claim by claim
(tests/claims.py) over the whole test corpus: the hand-written mistakes, the grammar's, the
unlisted, the held-out and the fresh ones."""
from __future__ import annotations

import pytest

from claims import check
from inprocess import grade, runs_here
from submissions.fresh import FRESH
from submissions.heldout import HELDOUT
from submissions.unlisted import UNLISTED
from submissions.variants import everything

SEED = 7


def _corpus() -> dict[str, str]:
    found = {name: s.text() for name, s in everything().items()
             if runs_here(s.text(), s.status) and not any({"timeout", "exit-called", "memory-limit"} & set(c)
                                                          for c in s.expected.values())}
    found.update({f"unlisted:{name}": s.text() for name, s in UNLISTED.items()})
    found.update({f"heldout:{name}": s.text() for name, s in HELDOUT.items() if runs_here(s.text())})
    found.update({f"fresh:{name}": s.text() for name, s in FRESH.items() if runs_here(s.text())})
    return found


CORPUS = _corpus()


@pytest.mark.parametrize("name", sorted(CORPUS))
def test_every_sentence_of_feedback_is_true_of_the_submission(name):
    check(grade(CORPUS[name], SEED))
