"""The model card's recipe section (worker/publish/card.py): how to make this output again. A job's card quotes
its request as the service ran it (defaults filled in); `nbl compress`'s rebuilds the command line from the
output's nbl_scores.json, the defaults left out, the selection and refinement flags included.
"""

from __future__ import annotations

import json

from .card_refine import refine_args


def recipe_section(report: dict, recipe: dict | None) -> str:
    if recipe:
        return (
            "The job request, as the service ran it (defaults filled in):\n\n```json\n"
            + json.dumps(recipe, indent=2, sort_keys=True)
            + "\n```\n"
        )
    r = report.get("recipe") or {}
    ds = r.get("dataset") or {}
    args = [f"--model {report.get('base_model')}"]
    if report.get("base_revision"):
        args.append(f"--revision {report['base_revision']}")
    if ds:
        args += dataset_args(ds, ("--dataset", "--dataset-config", "--split", "--text-field"), "train")
    for key in ("num_samples", "seq_len", "seed", "mode", "method", "criterion", "form", "k"):
        if key in r:
            auto = key == "k" and r.get("max_ppl_increase") is not None  # k auto: the budget, not the k it found
            args.append(
                f"--k auto --max-ppl-increase {r['max_ppl_increase']}"
                if auto
                else f"--{key.replace('_', '-')} {r[key]}"
            )
    if r.get("shuffle"):
        args.append("--shuffle")
    args += refine_args(r)
    args += selection_args((report.get("selection") or {}).get("data") or {})
    text = "```\nnbl compress " + " \\\n    ".join(args) + "\n```\n"
    if report.get("base_fingerprint"):
        text += f"\nBase weights: `{report['base_fingerprint']}`.\n"
    return text


def dataset_args(ds: dict, flags: tuple[str, str, str, str], default_split: str) -> list[str]:
    """A dataset's flags (name, config, split, text field), the defaults left out."""
    name, config, split, text_field = flags
    args = [f"{name} {ds.get('path')}"]
    if ds.get("config"):
        args.append(f"{config} {ds['config']}")
    if ds.get("split", default_split) != default_split:
        args.append(f"{split} {ds['split']}")
    if ds.get("text_field", "text") != "text":
        args.append(f"{text_field} {ds['text_field']}")
    return args


def selection_args(data: dict) -> list[str]:
    """The selection flags that reproduce a run measured on separate selection data (none for the held-out tenth)."""
    if data.get("source") != "selection dataset":
        return []
    flags = ("--selection-dataset", "--selection-config", "--selection-split", "--selection-text-field")
    return dataset_args(data, flags, "validation") + [f"--selection-samples {data.get('num_samples')}"]
