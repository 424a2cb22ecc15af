"""Mistakes no one chose: every single edit of the reference's source (tests/submissions/mutants.py),
and a fixed sample of edits two at a time, graded in this process.

- Every sentence of their feedback is true of them, claim by claim (tests/claims.py), as for the
  hand-written corpus.
- The hidden cases leave no edit unseen that some draw of them would catch: an edit that passes
  every step under the seed used here gives the reference's results under every other seed too
  (`1 -> -1` in an axis of a 2-D sum, or `weights_before` for the identical `weights_after`).
"""
from __future__ import annotations

import pytest

from claims import check
from inprocess import grade
from submissions import mutants

SEED = 7
OTHER_SEEDS = range(1, 13)
PAIRS = 150

SINGLES = {mutant.name: mutant for mutant in mutants.mutants()}
DOUBLES = {mutant.name: mutant for mutant in mutants.pairs(PAIRS)}


def test_the_edits_cover_every_function_and_kind():
    functions = {mutant.function for mutant in SINGLES.values()}
    assert functions == {"project_qkv", "scores", "scale", "softmax_rows", "mix", "attention", "self_attention_head",
                         "zero_query_mixture", "is_attention_weights", "column_normalized_counterexample",
                         "shifted_output", "output_change", "head_facts", "value_intervention"}
    edits = " ".join(SINGLES)
    for kind in ("->", "arguments swapped", "done twice", "axis=", "dropped", "always its branch", "left out",
                 "swapped", ".T", "np.exp -> np.log", ".max -> .sum"):
        assert kind in edits, kind
    assert len(SINGLES) > 600 and len(DOUBLES) > 0.9 * PAIRS


@pytest.mark.parametrize("name", sorted(SINGLES))
def test_every_sentence_is_true_of_a_single_edit(name):
    check(grade(SINGLES[name].text(), SEED))


@pytest.mark.parametrize("name", sorted(DOUBLES))
def test_every_sentence_is_true_of_two_edits(name):
    check(grade(DOUBLES[name].text(), SEED))


def _passes(text: str, seed: int) -> bool:
    return all(result.status == "passed" for result in grade(text, seed).steps.values())


def test_an_edit_the_hidden_cases_pass_is_one_no_draw_of_them_would_catch():
    unseen = []
    for name, mutant in SINGLES.items():
        if _passes(mutant.text(), SEED):
            caught = [seed for seed in OTHER_SEEDS if not _passes(mutant.text(), seed)]
            if caught:
                unseen.append(f"{name} (caught with seeds {caught})")
    assert not unseen, "\n".join(unseen)
