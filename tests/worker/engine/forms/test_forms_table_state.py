"""bench/forms_table.py resumes only from rows measured at its own settings, keeps the committed composition
table only when it was measured at the same settings, and reads issue 26's targets off the rows (no model)."""

from __future__ import annotations

import json
import sys
from argparse import Namespace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "bench"))

from forms_table_state import (  # noqa: E402
    COMPOSITION_KEYS,
    ROW_KEYS,
    load_composition,
    load_rows,
    save_composition,
    save_rows,
    settings_of,
    targets,
    targets_md,
)

ARGS = Namespace(
    num_samples=32,
    seq_len=256,
    max_tokens=4096,
    window=2048,
    arc_limit=100,
    gguf_tokens=4096,
    ctx=512,
    work=Path("/tmp/x"),
    out="forms_table",
)


def row(ppl: float) -> dict:
    return {"ppl": ppl, "arc_acc": 0.5}


def test_rows_resume_only_at_the_same_settings(tmp_path):
    state = tmp_path / "rows.json"
    at100 = settings_of(ARGS, ROW_KEYS)
    at500 = settings_of(Namespace(**{**vars(ARGS), "arc_limit": 500}), ROW_KEYS)
    assert at100["arc_limit"] == "100" and "work" not in at100 and "gguf_tokens" not in at100
    assert load_rows(state, at100) == {}  # no file yet
    save_rows(state, at100, {"base": row(18.98)})
    assert load_rows(state, at500) == {}  # the 100-question rows are never mixed into a 500-question table
    save_rows(state, at500, {"base": row(19.0), "nbl-attn-k4": row(22.8)})
    save_rows(state, at100, {"base": row(18.98), "fold-block-k2": row(27.5)})  # updates its own entry only
    assert load_rows(state, at100) == {"base": row(18.98), "fold-block-k2": row(27.5)}
    assert load_rows(state, at500) == {"base": row(19.0), "nbl-attn-k4": row(22.8)}
    assert len(json.loads(state.read_text())["runs"]) == 2


def test_a_file_without_settings_is_never_resumed_from_and_kept(tmp_path):
    state = tmp_path / "rows.json"
    state.write_text(json.dumps({"base": row(18.98)}))  # as written before the settings were kept
    at100 = settings_of(ARGS, ROW_KEYS)
    assert load_rows(state, at100) == {}
    save_rows(state, at100, {"base": row(18.5)})
    runs = json.loads(state.read_text())["runs"]
    assert runs == [{"settings": None, "rows": {"base": row(18.98)}}, {"settings": at100, "rows": {"base": row(18.5)}}]


def test_the_composition_comes_from_work_else_the_committed_table_at_the_same_settings(tmp_path):
    work, committed = tmp_path / "composition.json", tmp_path / "forms_table.json"
    s = settings_of(ARGS, COMPOSITION_KEYS)
    table = [{"model": "base", "type": "f16", "bytes": 1, "ppl": 24.5}]
    assert load_composition(work, committed, s) == []
    # the committed table stores every setting of its run as a string, the composition's among them
    committed.write_text(
        json.dumps({"settings": {**{k: str(v) for k, v in vars(ARGS).items()}, "arc_limit": "7"}, "composition": table})
    )
    assert load_composition(work, committed, s) == table  # the row settings (arc_limit) do not matter to it
    other = settings_of(Namespace(**{**vars(ARGS), "gguf_tokens": 8192}), COMPOSITION_KEYS)
    assert load_composition(work, committed, other) == []  # measured on other tokens: not kept
    mine = [{"model": "base", "type": "q8_0", "bytes": 2, "ppl": 24.6}]
    save_composition(work, other, mine)
    assert load_composition(work, committed, other) == mine
    assert load_composition(work, committed, s) == table  # the work dir's is at other settings


def test_targets_are_the_perplexity_gaps_of_the_issue():
    rows = {
        "nbl-attn-k4": row(22.83),
        "linear-attn-k4": row(22.75),
        "fold-attn-k4": row(23.18),
        "nbl-block-k4": row(34.75),
        "fold-block-k4": row(39.0),
    }
    got = {(t["form"], t["mode"], t["k"]): t for t in targets(rows)}
    assert len(got) == 6
    assert got["linear", "attn", 4]["met"] and abs(got["linear", "attn", 4]["gap"] - (22.75 / 22.83 - 1)) < 1e-12
    assert got["fold", "attn", 4]["met"] and got["fold", "attn", 4]["most"] == 0.04
    assert got["fold", "block", 4]["met"] is False  # +12.2 % over a 12 % target
    assert got["linear", "attn", 8]["met"] is None and got["fold", "block", 2]["gap"] is None  # rows missing
    md = "\n".join(targets_md(rows))
    assert "| attn `fold` within 4% of `nbl` at k=4 | 23.18 vs 22.83 | +1.5% | yes |" in md
    assert "| block `fold` within 12% of `nbl` at k=4 | 36.55" not in md and "+12.2% | no |" in md
    assert md.count("not measured") == 3
