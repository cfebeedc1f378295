"""Which evaluations `max_tokens` or `limit` cut short, and how much each scored, from the flat metrics
(worker/pipeline.py flatten): a perplexity cut short carries `corpus_tokens` beside the `tokens` it
scored (perplexity.py), a task scored `n` documents, at least `limit` when the limit cut it (MMLU's
limit is per subject). The job's warning, the card and its model-index all say it from here.
"""

from __future__ import annotations


def scored(metrics: dict[str, dict], limit: int | None, max_tokens: int | None) -> dict[str, dict]:
    """{"perplexity/wikitext2": {"tokens", "corpus_tokens", "max_tokens"}, "tasks/arc_easy": {"documents",
    "limit"}} for each evaluation cut short, read from an output's metrics (every output scores the same
    tokens and documents), else the base's."""
    variants = sorted(v for v in metrics if v.startswith("k")) or ["base"]
    flat = metrics.get(variants[0]) or {}
    out: dict[str, dict] = {}
    for key, value in sorted(flat.items()):
        section, _, leaf = key.rpartition("/")
        if value is None:
            continue
        if max_tokens is not None and leaf == "corpus_tokens" and section.startswith("perplexity/"):
            out[section] = {
                "tokens": int(flat.get(f"{section}/tokens") or 0),
                "corpus_tokens": int(value),
                "max_tokens": max_tokens,
            }
        elif limit is not None and leaf == "n" and section.startswith("tasks/") and value >= limit:
            out[section] = {"documents": int(value), "limit": limit}
    return out


def label(section: str) -> str:
    """perplexity/wikitext2 -> 'wikitext2 perplexity'; tasks/arc_easy -> 'arc_easy'."""
    kind, _, name = section.partition("/")
    return f"{name} perplexity" if kind == "perplexity" else name


def describe(section: str, info: dict) -> str:
    """'wikitext2 perplexity on 4,094 of 287,645 tokens (max_tokens 4,096)', 'arc_easy on 500 documents (limit 500)'."""
    if "tokens" in info:
        return (
            f"{label(section)} on {info['tokens']:,} of {info['corpus_tokens']:,} tokens "
            f"(max_tokens {info['max_tokens']:,})"
        )
    return f"{label(section)} on {info['documents']:,} documents (limit {info['limit']:,})"
