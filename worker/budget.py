"""k auto's budget, held on the job's own evaluation and not only on the selection data.

k auto picks the largest k whose *selection* perplexity rises by at most the budget r. The evaluation measures
the rise again on its own corpora; for each perplexity corpus of the evaluation the output is checked as a
perplexity gate of r would check it (worker/gates.py check_one, gate "budget"):

    passed  <=>  ppl <= ppl_base * (1 + r)

- `budget.enforce` true (the default): the checks join the job's gates: a broken budget holds the output back,
  and with none left the job fails with error.type "quality" (nbl wait exits 5) before anything is published.
- `budget.enforce` false: each broken check is a warning (an event, in the job's warnings, and on the card),
  and the output is published.
- An evaluation that measures no perplexity cannot check the budget: that is a warning too, never silence.

Also the selection's own uncertainty (nbl/selection/rise_error.py): a standard error of the chosen set's rise above a
third of the budget is a warning naming the selection tokens that would resolve it.
"""

from __future__ import annotations

from nbl.gates import PPL_METRIC
from nbl.recipe import Recipe
from nbl.selection.rise_error import RESOLVE, tokens_needed, unresolved

from .gates import Metrics, check_one, describe


def evaluation_checks(recipe: Recipe, metrics: Metrics, ks: list[int]) -> list[dict]:
    """The budget checked on each evaluation corpus for each output (empty when k is not auto)."""
    budget = recipe.compression.max_ppl_increase
    if budget is None:
        return []
    base = metrics.get("base") or {}
    return [
        check_one(
            f"k{k}",
            PPL_METRIC.format(corpus),
            "budget",
            budget,
            base.get(PPL_METRIC.format(corpus)),
            (metrics.get(f"k{k}") or {}).get(PPL_METRIC.format(corpus)),
        )
        for k in ks
        for corpus in recipe.evaluation.perplexity
    ]


def on_evaluation(recipe: Recipe, metrics: Metrics, ks: list[int], warn) -> list[dict]:
    """The checks that gate publishing (enforced budget), after sending the warnings of an unenforced or
    uncheckable budget to `warn`. Returns the warnings' texts too, for the cards: (checks, warnings)."""
    budget = recipe.compression.max_ppl_increase
    if budget is None:
        return [], []
    warnings = []
    if not recipe.evaluation.perplexity:
        warnings.append(
            f"k auto's budget (+{budget:.4g}) is not checked on the evaluation: it measures no "
            "perplexity; add a corpus to evaluation.perplexity (e.g. wikitext2)"
        )
    found = evaluation_checks(recipe, metrics, ks)
    if not recipe.compression.enforce_budget:
        warnings += [
            f"k auto's budget is broken on the evaluation (budget.enforce is false, so it is published): {describe(c)}"
            for c in found
            if not c["passed"]
        ]
        found = []
    for w in warnings:
        warn(w)
    return found, warnings


def selection_warning(recipe: Recipe, selection: dict | None, seq_len: int) -> str | None:
    """A warning when the chosen set's selection rise is not resolved within the budget (se > budget / 3)."""
    budget = recipe.compression.max_ppl_increase
    if budget is None or not selection:
        return None
    for c in selection.get("chosen") or []:
        if unresolved(c.get("rise_se"), budget):
            need = tokens_needed(budget, c.get("sd_per_token"))
            return (
                f"k auto's selection rise +{100 * c['rise']:.1f}% ± {100 * c['rise_se']:.1f}% (standard error over "
                f"{c['blocks']} blocks) is not resolved within the budget +{100 * budget:.4g}%: the error is above "
                f"1/{RESOLVE} of it; about {need:,} selection tokens would resolve it "
                f"(selection.num_samples >= {-(-need // max(seq_len - 1, 1))} at seq_len {seq_len})"
            )
    return None
