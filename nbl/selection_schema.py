"""The request's measured-selection parts (schemas.py holds the SelectionSpec itself): k auto's budget, and the
rule that selection data is never the evaluation's.

    "compression": {"k": "auto", "criterion": "auto", "budget": {"max_ppl_increase": 0.10}},
    "selection": {"dataset": "wikitext2", "split": "validation", "num_samples": 32}

The budget is the largest relative rise of the selection data's perplexity (0.10: +10%). Selection data that
is the file and split an evaluation corpus reads would choose the layers on the very text that then scores
them: refused at submit (422), as FastAPI-shaped errors naming the field. Torch-free: the API imports this.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

# What each evaluation corpus reads (worker/eval/perplexity.py CORPORA), under the names a dataset may take:
# the offline alias and the Hub ids of the same data.
EVALUATION_DATA = {"wikitext2": ("test", ("wikitext2", "wikitext", "salesforce/wikitext")),
                   "c4": ("validation", ("c4", "allenai/c4"))}


class BudgetSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    max_ppl_increase: Annotated[float, Field(gt=0, le=100, allow_inf_nan=False, description=(
        "k auto: the largest k whose selection perplexity rises by at most this (0.10 = +10%)"))]


def check_budget(compression):
    """CompressionSpec's rule (a model validator): k auto and a budget go together."""
    auto, budget = compression.k == "auto", compression.budget is not None
    if auto and not budget:
        raise ValueError('k "auto" needs budget.max_ppl_increase: the largest k within it is chosen')
    if budget and not auto:
        raise ValueError('budget applies to k "auto" only: give k "auto", or drop the budget')
    return compression


def without_none(*keys: str):
    """A wrap serializer leaving out `keys` when None: a request that does not use them dumps, is stored and is
    quoted on the card exactly as before they existed."""
    def dump(self, handler):
        out = handler(self)
        return {k: v for k, v in out.items() if not (k in keys and v is None)} if isinstance(out, dict) else out
    return dump


def _same_data(dataset: str, split: str, corpus: str) -> bool:
    eval_split, names = EVALUATION_DATA[corpus]
    return dataset.lower().replace("-", "") in {n.replace("-", "") for n in names} and split.split("[")[0] == eval_split


def selection_errors(spec) -> list[dict]:
    """The job request's (a schemas.JobCreate) selection data that is an evaluation corpus's file and split."""
    sel = spec.selection
    if sel is None:
        return []
    return [{"loc": ["body", "selection", "split"], "type": "selection_is_evaluation", "input": sel.split,
             "msg": f"selection data {sel.dataset!r} split {sel.split!r} is what the {corpus} perplexity evaluates: "
                    f"layers chosen on it would be scored on it; choose another split (e.g. validation for "
                    f"wikitext2, train for c4)"}
            for corpus in spec.evaluation.perplexity if corpus in EVALUATION_DATA and _same_data(sel.dataset, sel.split, corpus)]
