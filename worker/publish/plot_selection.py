"""The figure's second panel when the greedy chose: the selection data's perplexity after each greedy step
(worker/engine/selection/auto_k.py's record: `greedy_steps`, `base_ppl`), the base and k auto's budget as lines, the cut
after step k. The steps may run past k: k auto's bisection grows the greedy beyond the k it keeps."""

from __future__ import annotations

import math
from dataclasses import dataclass

GREEDY = "greedy"


@dataclass(frozen=True)
class GreedyPanel:
    added: list[int]  # the layer added at step 1, 2, ...
    ppl: list[float]  # the selection perplexity with the first n added replaced (NaN: not finite)
    base_ppl: float | None  # nothing replaced
    budget_ppl: float | None  # base x (1 + max_ppl_increase), k auto only
    k: int  # steps kept: the cut falls between step k and k + 1
    max_ppl_increase: float | None = None

    @property
    def steps(self) -> list[int]:
        return list(range(1, len(self.added) + 1))

    @property
    def cut(self) -> float | None:
        """Between step k and k + 1; None when k is not among the steps (nothing greedy kept)."""
        return self.k + 0.5 if 0 < self.k <= len(self.added) else None


def greedy_panel(report: dict) -> GreedyPanel | None:
    """The panel's data, or None when the report holds no greedy steps."""
    selection = report.get("selection") or {}
    steps = selection.get("greedy_steps") or []
    if not steps:
        return None
    base = selection.get("base_ppl")
    budget = (report.get("recipe") or {}).get("max_ppl_increase")
    return GreedyPanel(
        added=[s["added"] for s in steps],
        ppl=[math.nan if s.get("heldout_ppl") is None else float(s["heldout_ppl"]) for s in steps],
        base_ppl=base,
        budget_ppl=base * (1 + budget) if base is not None and budget is not None else None,
        k=len(report.get("replaced_layers") or []),
        max_ppl_increase=budget,
    )


def draw_greedy(ax, panel: GreedyPanel) -> None:
    """Onto a matplotlib Axes."""
    ax.plot(panel.steps, panel.ppl, marker="o", color="#1f77b4", label="selection ppl after the step")
    if panel.base_ppl is not None:
        ax.axhline(panel.base_ppl, color="grey", linewidth=1, label=f"base ppl {panel.base_ppl:.3f}")
    if panel.budget_ppl is not None:
        low, high = ax.get_ylim()
        off = panel.budget_ppl > high  # a loose budget would flatten the curve: named, not drawn to scale
        ax.axhline(
            panel.budget_ppl,
            color="#ff7f0e",
            linestyle=":",
            linewidth=1.2,
            label=f"budget +{panel.max_ppl_increase:.0%} ({panel.budget_ppl:.4g}{', off the top' if off else ''})",
        )
        if off:
            ax.set_ylim(low, high)
    if panel.cut is not None:
        ax.axvline(panel.cut, color="black", linestyle="--", linewidth=1, label=f"cut (k={panel.k})")
    ax.set_xticks(panel.steps, [f"{s}\n+{layer}" for s, layer in zip(panel.steps, panel.added)], fontsize=7)
    ax.set_xlabel("greedy step (+ layer added)")
    ax.set_ylabel("selection perplexity", fontsize=8)
    ax.set_title("greedy on the selection data: perplexity as layers are added", fontsize=9)
    ax.legend(fontsize=8, loc="best")
