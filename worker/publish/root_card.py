"""The card at the root of a repo that holds several outputs side by side (`k{K}/`, each with its own
card): the Hub renders only the root README.md, so this one says what the subfolders are.

    front matter   base_model, license, tags, library_name (as each output's card)
    body           one row per output: k, replaced layers, key metrics beside the base's, a link to
                   its folder and full card; the loading snippet with `subfolder=`

Built from the same plain data as the outputs' cards (their nbl_scores.json and the job's flat metrics).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .card import PAPER, README, TAGS, base_label, format_number, hub_base, usage_section


@dataclass
class RootEntry:
    k: int
    report: dict  # the output's nbl_scores.json
    metrics: dict[str, float] = field(default_factory=dict)  # its flat evaluation, e.g. perplexity/wikitext2/ppl


def key_metrics(flat: dict[str, float]) -> list[str]:
    """The headline numbers a table row shows: perplexities, task accuracies, KV cache."""
    keys = sorted(k for k in flat if k.startswith("perplexity/") and k.endswith("/ppl"))
    keys += sorted(k for k in flat if k.startswith("tasks/") and k.endswith("/acc"))
    return keys + [k for k in ("speed/kv_cache_bytes_per_token",) if k in flat]


def _label(key: str) -> str:
    parts = key.split("/")
    return {"perplexity": f"{parts[1]} ppl ↓", "tasks": f"{parts[1]} acc ↑"}.get(parts[0], "KV bytes/token ↓")


def root_card_text(
    entries: list[RootEntry],
    base_metrics: dict[str, float],
    location: tuple[str, str | None],
    recipe: dict | None = None,
) -> str:
    """`location`: (what from_pretrained takes, subfolder) of the first output, for the loading snippet."""
    from huggingface_hub import ModelCardData

    first = entries[0].report
    mode = (first.get("recipe") or {}).get("mode", "attn")
    data = ModelCardData(
        base_model=hub_base(first),
        license=first.get("base_license"),
        library_name="transformers",
        pipeline_tag="text-generation",
        tags=list(TAGS),
    )
    keys = key_metrics({**base_metrics, **{m: v for e in entries for m, v in e.metrics.items()}})
    head = "| output | k | replaced layers | " + "".join(f"{_label(k)} | " for k in keys)
    rows = [head.rstrip(), "|---|---:|---|" + "---:|" * len(keys)]
    if base_metrics:
        rows.append(
            "| base model | 0 | – | " + "".join(f"{format_number(base_metrics.get(k))} | " for k in keys).rstrip()
        )
    for e in entries:
        layers = ", ".join(map(str, e.report.get("replaced_layers") or []))
        rows.append(
            f"| [k{e.k}/](k{e.k}) | {e.k} | {layers} | "
            + "".join(f"{format_number(e.metrics.get(k))} | " for k in keys).rstrip()
        )
    body = (
        f"# {base_label(first, recipe).split('/')[-1].removeprefix('local:')}: NBL-compressed ({mode} mode)\n\n"
        f"**{base_label(first, recipe)}** compressed with Neural Block Linearization ([arXiv 2505.21077]({PAPER})) "
        f"at {len(entries)} levels: each folder below is a self-contained model with its own card (recipe, "
        "per-layer scores, the full before/after table).\n\n"
        + "\n".join(rows)
        + "\n\n## How to load\n\n"
        + usage_section(*location)
    )
    return f"---\n{data.to_yaml()}\n---\n\n{body}"


def write_root_card(
    directory: Path,
    entries: list[RootEntry],
    base_metrics: dict[str, float],
    location: tuple[str, str | None],
    recipe: dict | None = None,
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / README
    path.write_text(root_card_text(entries, base_metrics, location, recipe), encoding="utf-8")
    return path
