"""What bench/forms_table.py keeps between runs, and the issue's targets read off its rows (no torch, no model).

A row is only as good as the settings it was measured at: a row at 4,096 WikiText-2 tokens and 100 ARC-e questions
mixed into a table announcing 16,384 and 500 would be a false figure. So the resume file WORK/rows.json holds one
entry per set of settings, and a run resumes only from the entry whose settings equal its own:

    {"runs": [{"settings": {"num_samples": "32", ...}, "rows": {"base": {...}, "fold-block-k2": {...}}}, ...]}

The composition table (GGUF, llama.cpp) needs the GGUF venv; a run without it keeps the one in the committed
bench/results/forms_table.json when that one was measured at the same settings.
"""

from __future__ import annotations

import json
from pathlib import Path

# the settings a form row's figures depend on (calibration, perplexity, ARC-e)
ROW_KEYS = ("num_samples", "seq_len", "max_tokens", "window", "arc_limit")
# the composition's: the composed output's calibration and llama.cpp's perplexity
COMPOSITION_KEYS = ("num_samples", "seq_len", "gguf_tokens", "ctx")


def settings_of(args, keys: tuple[str, ...]) -> dict[str, str]:
    """The run's settings at `keys`, as strings (as forms_table.json stores them)."""
    return {k: str(getattr(args, k)) for k in keys}


def _runs(state: object) -> list[dict]:
    # a file from before the settings were kept (a flat {name: row}) has unknown settings: never resumed from
    if isinstance(state, dict) and isinstance(state.get("runs"), list):
        return state["runs"]
    return [{"settings": None, "rows": state}] if isinstance(state, dict) and state else []


def load_rows(path: Path, settings: dict[str, str]) -> dict:
    """The rows measured before at exactly `settings` ({} when none were)."""
    if not path.exists():
        return {}
    return next((r["rows"] for r in _runs(json.loads(path.read_text())) if r["settings"] == settings), {})


def save_rows(path: Path, settings: dict[str, str], rows: dict) -> None:
    """Store `rows` under `settings`, keeping the entries of other settings as they were."""
    runs = _runs(json.loads(path.read_text())) if path.exists() else []
    runs = [r for r in runs if r["settings"] != settings] + [{"settings": settings, "rows": rows}]
    path.write_text(json.dumps({"runs": runs}, indent=1))


def load_composition(work_file: Path, committed: Path, settings: dict[str, str]) -> list[dict]:
    """The composition measured at `settings`: this work dir's, else the committed table's, else []."""
    if work_file.exists():
        got = json.loads(work_file.read_text())
        if isinstance(got, dict) and got.get("settings") == settings:
            return got["composition"]
    if committed.exists():
        table = json.loads(committed.read_text())
        if {k: table.get("settings", {}).get(k) for k in settings} == settings:
            return table.get("composition") or []
    return []


def save_composition(work_file: Path, settings: dict[str, str], comp: list[dict]) -> None:
    work_file.write_text(json.dumps({"settings": settings, "composition": comp}))


# issue 26's targets: (form measured, against form, mode, k, the most its perplexity may exceed the other's)
TARGETS = [
    ("linear", "nbl", "attn", 4, 0.01),
    ("linear", "nbl", "attn", 8, 0.01),
    ("fold", "nbl", "attn", 4, 0.04),
    ("fold", "nbl", "attn", 8, 0.07),
    ("fold", "nbl", "block", 2, 0.08),
    ("fold", "nbl", "block", 4, 0.12),
]


def targets(rows: dict) -> list[dict]:
    """Each perplexity target with its measured gap ppl(form) / ppl(against) - 1 and whether it is met
    (None: a row is missing)."""
    out = []
    for form, against, mode, k, most in TARGETS:
        a, b = rows.get(f"{form}-{mode}-k{k}"), rows.get(f"{against}-{mode}-k{k}")
        gap = None if a is None or b is None else a["ppl"] / b["ppl"] - 1
        out.append(
            {
                "form": form,
                "against": against,
                "mode": mode,
                "k": k,
                "most": most,
                "ppl": a and a["ppl"],
                "against_ppl": b and b["ppl"],
                "gap": gap,
                "met": None if gap is None else gap <= most,
            }
        )
    return out


def targets_md(rows: dict) -> list[str]:
    """The targets as a markdown table."""
    md = ["| target | measured (WikiText-2 ppl) | gap | met |", "|---|---|---:|---|"]
    for t in targets(rows):
        what = f"{t['mode']} `{t['form']}` within {t['most']:.0%} of `{t['against']}` at k={t['k']}"
        if t["gap"] is None:
            md.append(f"| {what} | not measured | - | - |")
            continue
        md.append(
            f"| {what} | {t['ppl']:.2f} vs {t['against_ppl']:.2f} | {t['gap']:+.1%} | {'yes' if t['met'] else 'no'} |"
        )
    return md
