"""The card's Refinement section and command line (worker/publish/card_refine.py), from an output's nbl_scores.json."""

from __future__ import annotations

from worker.publish.card import CardInfo, card_text
from worker.publish.card_recipe import recipe_section

REPORT = {
    "base_model": "m",
    "replaced_layers": [3, 5],
    "layers": [],
    "recipe": {
        "dataset": {"path": "c4", "split": "train"},
        "num_samples": 8,
        "mode": "attn",
        "k": 2,
        "refit": "sequential",
        "heal": {"tokens": 512, "steps": 6, "lr": 0.0001, "max_seconds": None},
    },
    "refine": {
        "refit": {
            "method": "sequential",
            "seconds": 3.25,
            "cached": False,
            "nmse": {"3": {"one_shot": 0.3, "refit": 0.3}, "5": {"one_shot": 0.5, "refit": 0.3}},
        },
        "heal": {
            "steps": 6,
            "tokens": 1536,
            "seconds": 12.5,
            "perplexity_before": 41.2,
            "perplexity_after": 39.9,
            "kept": True,
            "lr": 0.0001,
            "held_tokens": 256,
        },
    },
}


def test_the_card_says_how_the_maps_were_refined():
    text = card_text(CardInfo(report=REPORT, plot=None))
    section = text.split("## Refinement")[1].split("\n## ")[0]
    assert "Sequential refit" in section and "0.4000 (one-shot maps) → 0.3000 (refitted)" in section
    assert "1,536 tokens in 6 steps" in section and "41.200 before → 39.900 after (kept)" in section
    assert "## Refinement" not in card_text(CardInfo(report={**REPORT, "refine": None}, plot=None))
    not_kept = {**REPORT, "refine": {"heal": {**REPORT["refine"]["heal"], "kept": False}}}
    assert "not kept: healing raised a perplexity" in card_text(CardInfo(report=not_kept, plot=None))
    assert "guard" not in section
    guarded = {
        **REPORT,
        "refine": {
            "heal": {
                **REPORT["refine"]["heal"],
                "kept": False,
                "guard_tokens": 8192,
                "guard_perplexity_before": 27.5,
                "guard_perplexity_after": 28.25,
            }
        },
    }
    assert (
        "41.200 before → 39.900 after; on 8,192 tokens of the selection dataset (the guard): 27.500 before → "
        "28.250 after (not kept"
    ) in card_text(CardInfo(report=guarded, plot=None))


def test_the_cards_command_line_repeats_the_refinement():
    text = recipe_section(REPORT, None)
    assert "--refit sequential" in text and "--heal-tokens 512" in text and "--heal-steps 6" in text
    assert "--heal-seconds" not in text
