"""The thirteen graded steps, each described once.

Everything else reads this table: the stub and the notebook headings, the hidden graders, the
feedback and every results view. The order here is the order of `steps` in every result.
"""
from __future__ import annotations

from dataclasses import dataclass


SETUP_ARRAYS = (("X", "T, d_in"), ("W_Q", "d_in, d_k"), ("W_K", "d_in, d_k"), ("W_V", "d_in, d_v"))
"""The chapter's example as the notebook's setup cell (and the sample module) binds it: name, shape."""


@dataclass(frozen=True)
class Step:
    id: str
    """The contract's step id, as it appears in results."""
    title: str
    """A short heading, used in the notebook and in reports."""
    section: str
    """The chapter section a student should reread, e.g. "§15.2"."""
    points: float
    """What the step is worth; the thirteen add up to 100."""
    functions: tuple[str, ...]
    """The student functions the step calls."""
    task: str
    """One sentence: what the student's code must do."""
    uses: tuple[str, ...] = ()
    """Earlier steps whose functions a typical solution calls: which step builds on which. Feedback
    names a failing one first, and a mistake made there is carried forward to this step (see
    judge.py and carry.py); steps are listed, and judged, after every step they use."""


STEPS: tuple[Step, ...] = (
    Step("qkv", "Project the input three ways", "§15.1", 8.0, ("project_qkv",),
         "Multiply the input rows by W_Q, W_K and W_V to get queries, keys and values."),
    Step("scores", "Compare every receiving row with every key", "§15.2", 8.0, ("scores",),
         "Build D = Q Kᵀ, whose row i holds query i's dot product with every key."),
    Step("scale", "Divide the scores by √d_k", "§15.3", 7.0, ("scale",),
         "Divide every score by the square root of the query/key width d_k."),
    Step("softmax", "Normalize each receiving row", "§15.3", 10.0, ("softmax_rows",),
         "Turn each row of scores into weights over the keys: non-negative, summing to one, "
         "and finite even for scores in the thousands."),
    Step("mix", "Mix the value rows", "§15.4", 7.0, ("mix",),
         "Give each receiving position the weighted sum of the value rows, O = A V."),
    Step("attention", "Scaled dot-product attention", "§15.4", 8.0, ("attention",),
         "Chain the score, scale, softmax and mix steps, reading d_k from the queries.",
         uses=("scores", "scale", "softmax", "mix")),
    Step("head", "One self-attention head", "§15.6", 8.0, ("self_attention_head",),
         "Project one sequence and attend over it, returning the output and the weights.",
         uses=("qkv", "attention")),
    Step("batch", "A batch of sequences", "§15.4", 8.0, ("self_attention_head",),
         "Run the head on a [B, T, d_in] batch, each example on its own.",
         uses=("head",)),
    Step("ex1_zero_query", "Exercise 1: a query of zeros", "§15.8", 6.0, ("zero_query_mixture",),
         "Attend with an all-zero query: equal weights, and the mean of the value rows.",
         uses=("scale", "softmax")),
    Step("ex2_row_normalization", "Exercise 2: rows, not columns", "§15.8", 8.0,
         ("is_attention_weights", "column_normalized_counterexample"),
         "Recognise valid attention weights, and build a column-normalized matrix that is not."),
    Step("ex3_value_shift", "Exercise 3: shifting the values", "§15.8", 8.0,
         ("shifted_output", "output_change"),
         "Predict how the output moves when some or all value rows are shifted."),
    Step("ex4_shapes", "Exercise 4: shapes and the divisor", "§15.8", 6.0, ("head_facts",),
         "State the divisor, the score and output shapes, and the softmax axis of a head."),
    Step("ex5_intervention", "Exercise 5: a controlled intervention", "§15.8", 8.0,
         ("value_intervention",),
         "Change only W_V and report the weights and outputs before and after.",
         uses=("head",)),
)

STEP_IDS: tuple[str, ...] = tuple(step.id for step in STEPS)
BY_ID: dict[str, Step] = {step.id: step for step in STEPS}
MAX_SCORE: float = sum(step.points for step in STEPS)

# Written answers: graded by a person in nbgrader; in a .py submission only checked to be present.
ANSWERS: tuple[tuple[str, str], ...] = (
    ("ANSWER_1", "Why does a query of zeros not give an output of zeros?"),
    ("ANSWER_2", "Why are unit column sums not enough to reproduce the head?"),
    ("ANSWER_3", "Does the value-shift argument still hold when only one value row changes?"),
    ("ANSWER_4", "Why is dividing by the number of positions T a different operation?"),
    ("ANSWER_5", "What evidence does a large weight on 'red' miss, and what comparison would supply it?"),
)
