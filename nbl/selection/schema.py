"""The request's measured-selection parts (schemas.py holds the SelectionSpec itself): k auto's budget, and the
rule that selection data is never the evaluation's.

    "compression": {"k": "auto", "criterion": "auto", "budget": {"max_ppl_increase": 0.10}},
    "selection": {"dataset": "wikitext2", "split": "validation", "num_samples": 32}

The budget is the largest relative rise of the selection data's perplexity (0.10: +10%); it is checked on the
evaluation's perplexity too (worker/budget.py), failing the job unless `"enforce": false`. Selection data that
is the file and split an evaluation corpus reads would choose the layers on the very text that then scores
them: refused at submit (422), as FastAPI-shaped errors naming the field. Torch-free: the API imports this.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from nbl.selection.rise_error import tokens_needed

# What each evaluation corpus reads (worker/eval/perplexity.py CORPORA), under the names a dataset may take:
# the offline alias and the Hub ids of the same data.
EVALUATION_DATA = {
    "wikitext2": ("test", ("wikitext2", "wikitext", "salesforce/wikitext")),
    "c4": ("validation", ("c4", "allenai/c4")),
}


def without_none(*keys: str):
    """A wrap serializer leaving out `keys` when None: a request that does not use them dumps, is stored and is
    quoted on the card exactly as before they existed."""

    def dump(self, handler):
        out = handler(self)
        return {k: v for k, v in out.items() if not (k in keys and v is None)} if isinstance(out, dict) else out

    return dump


class BudgetSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    max_ppl_increase: Annotated[
        float,
        Field(
            gt=0,
            le=100,
            allow_inf_nan=False,
            description=("k auto: the largest k whose selection perplexity rises by at most this (0.10 = +10%)"),
        ),
    ]
    enforce: bool | None = Field(
        default=None,
        description=(
            "the budget is checked on the evaluation's perplexity too: broken, the job fails with error.type quality "
            "(default); false: a warning, and the output is published"
        ),
    )
    _dump = model_serializer(mode="wrap")(without_none("enforce"))  # a budget without it dumps as before


def check_budget(compression):
    """CompressionSpec's rule (a model validator): k auto and a budget go together."""
    auto, budget = compression.k == "auto", compression.budget is not None
    if auto and not budget:
        raise ValueError('k "auto" needs budget.max_ppl_increase: the largest k within it is chosen')
    if budget and not auto:
        raise ValueError('budget applies to k "auto" only: give k "auto", or drop the budget')
    return compression


def _same_data(dataset: str, split: str, corpus: str) -> bool:
    eval_split, names = EVALUATION_DATA[corpus]
    return dataset.lower().replace("-", "") in {n.replace("-", "") for n in names} and split.split("[")[0] == eval_split


def selection_errors(spec) -> list[dict]:
    """The job request's (a schemas.JobCreate) selection data that is an evaluation corpus's file and split."""
    sel = spec.selection
    if sel is None:
        return []
    return [
        {
            "loc": ["body", "selection", "split"],
            "type": "selection_is_evaluation",
            "input": sel.split,
            "msg": f"selection data {sel.dataset!r} split {sel.split!r} is what the {corpus} perplexity evaluates: "
            f"layers chosen on it would be scored on it; choose another split (e.g. validation for "
            f"wikitext2, train for c4)",
        }
        for corpus in spec.evaluation.perplexity
        if corpus in EVALUATION_DATA and _same_data(sel.dataset, sel.split, corpus)
    ]


def selection_tokens(spec) -> tuple[int, int]:
    """(selection blocks, next-token predictions) a job's k auto will score: its selection data's, else the
    calibration's held-out tenth (worker/engine/calibration/calibrate.py holdout_count)."""
    seq_len = spec.calibration.seq_len
    n = spec.calibration.num_samples
    blocks = spec.selection.num_samples if spec.selection is not None else (max(1, int(n * 0.1)) if n >= 2 else 0)
    return blocks, blocks * (seq_len - 1)


def budget_errors(spec) -> list[dict]:
    """k auto whose selection data is too small to resolve its budget (nbl/selection/rise_error.py: a standard error of the
    rise at most a third of the budget, under the documented prior), naming the selection tokens that would be."""
    comp = spec.compression
    if comp.k != "auto" or comp.budget is None:
        return []
    budget = comp.budget.max_ppl_increase
    blocks, tokens = selection_tokens(spec)
    need = tokens_needed(budget)
    if tokens >= need:
        return []
    seq_len = spec.calibration.seq_len
    samples = -(-need // max(seq_len - 1, 1))
    where = (
        "selection.num_samples >="
        if spec.selection is not None
        else "a selection dataset (selection.dataset) with num_samples >="
    )
    return [
        {
            "loc": ["body", "selection", "num_samples"] if spec.selection is not None else ["body", "selection"],
            "type": "selection_too_small",
            "input": blocks,
            "msg": f"k auto with a budget of +{100 * budget:.4g}% needs about {need:,} selection tokens to resolve it "
            f"(the rise's standard error at most a third of the budget, by the prior of docs/quality.md); "
            f"{blocks} blocks of {seq_len} give {tokens:,}: give {where} {samples}",
        }
    ]
