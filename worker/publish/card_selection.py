"""The card's "Selection" section: for a measured criterion (greedy, auto) or k auto, which criterion chose the
layers and why, that is the held-out table of every layer set measured on the selection data (nbl_scores.json's
`selection`, worker/engine/selection/auto_k.py). Pure."""

from __future__ import annotations


def _ppl(v) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def selection_section(selection: dict | None, k: int) -> str | None:
    """Markdown, or None when the layers were ranked by a per-layer criterion alone."""
    if not selection:
        return None
    data = selection.get("data") or {}
    if data.get("in_distribution") and data.get("source") == "calibration held-out":
        where = "the calibration's held-out tenth (in-distribution: it may favour maps that do not travel)"
    else:
        where = f"`{data.get('path')}` split `{data.get('split')}`" + (
            " (the calibration's own data)" if data.get("in_distribution") else ""
        )
    won = next((c for c in selection.get("chosen") or [] if c["k"] == k), None)
    text = (
        f"Layers chosen by measurement on {where}: {selection.get('tokens')} tokens, base perplexity "
        f"{_ppl(selection.get('base_ppl'))}.\n"
    )
    if won is not None:
        text += f"\nThis output (k={k}): **{won['criterion']}**, the lowest selection perplexity of the sets below.\n"
    text += "\n| k | criterion | layers | selection ppl | kept |\n|---:|---|---|---:|:---:|\n"
    for t in selection.get("tried") or []:
        kept = "✔" if won is not None and t["k"] == k and t["criterion"] == won["criterion"] else ""
        text += f"| {t['k']} | {t['criterion']} | {t['layers']} | {_ppl(t.get('heldout_ppl'))} | {kept} |\n"
    return text
