"""The card's "Refinement" section: how the maps were refined after the layers were chosen (compression.refit,
compression.heal; worker/engine/refine/stage.py), from the output's own nbl_scores.json."""

from __future__ import annotations


def refine_section(refine: dict | None) -> str | None:
    """None when the maps are the one-shot fit (no refit, no healing)."""
    if not refine:
        return None
    lines = []
    refit = refine.get("refit")
    if refit:
        nmse = refit.get("nmse") or {}
        gains = [(v["one_shot"], v["refit"]) for v in nmse.values() if v]
        mean = (
            (
                f"; mean NMSE on the compressed model's activations {sum(a for a, _ in gains) / len(gains):.4f} "
                f"(one-shot maps) → {sum(b for _, b in gains) / len(gains):.4f} (refitted)"
            )
            if gains
            else ""
        )
        lines.append(
            f"- **Sequential refit**: each replaced layer's map refitted in depth order on the compressed "
            f"model's own activations, against the base layer run on them ({refit.get('seconds', 0):.1f} s"
            f"{', from the statistics cache' if refit.get('cached') else ''}{mean})."
        )
    heal = refine.get("heal")
    if heal:
        kept = (
            "kept" if heal.get("kept") else "not kept: healing raised a perplexity, so the maps before healing are used"
        )
        guard = (
            ""
            if heal.get("guard_perplexity_before") is None
            else f"; on {heal.get('guard_tokens', 0):,} tokens of the selection dataset (the guard): "
            f"{heal['guard_perplexity_before']:.3f} before → {heal.get('guard_perplexity_after', 0):.3f} after"
        )
        lines.append(
            f"- **Healing**: the maps (only) trained against the base model's next-token distribution (KL on "
            f"its top-64 logits): {heal.get('tokens', 0):,} tokens in {heal.get('steps', 0)} steps, Adam lr "
            f"{heal.get('lr')}, {heal.get('seconds', 0):.1f} s. Perplexity on {heal.get('held_tokens', 0):,} "
            f"held-out calibration-dataset tokens: {heal.get('perplexity_before', 0):.3f} before → "
            f"{heal.get('perplexity_after', 0):.3f} after{guard} ({kept})."
        )
    return "\n".join(lines) + "\n"


def refine_args(recipe: dict) -> list[str]:
    """`nbl compress`'s refinement flags of an output's recipe (nbl_scores.json), for the card's command line."""
    args = [f"--refit {recipe['refit']}"] if recipe.get("refit") else []
    heal = recipe.get("heal") or {}
    for key, flag in (
        ("tokens", "--heal-tokens"),
        ("steps", "--heal-steps"),
        ("lr", "--heal-lr"),
        ("max_seconds", "--heal-seconds"),
    ):
        if heal.get(key) is not None:
            args.append(f"{flag} {heal[key]}")
    return args
