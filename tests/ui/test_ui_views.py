"""The dashboard's pure parts: the SVG score chart (cuts, selected bars, escaping) and what the
pages compute from jobs (result deltas, the stage timeline, recipe differences)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace as NS
from xml.etree import ElementTree

import pytest

from nbl.result import output_entry
from nbl.result_schema import JobResult
from service.ui import chart, compare, metrics, views
from service.ui.request_diff import request_diff

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_cut_lies_between_the_kth_and_next_ranked_layer():
    values = {0: 3.0, 1: 1.0, 2: 2.0, 3: 0.5}
    assert chart.cuts(values, [1, 2, 4, 9], higher_first=False) == {1: 0.75, 2: 1.5}  # no cut at k >= layers
    assert chart.cuts(values, [1], higher_first=True) == {1: 2.5}  # cosine: highest first


def test_chart_is_valid_svg_with_selected_bars_and_escaped_text():
    svg = chart.score_chart({0: 3.0, 1: 1.0, 2: 2.0, 3: -0.5}, {1, 3}, [2], "loss_rise", False, "a <b> & c")
    root = ElementTree.fromstring(svg)  # well-formed XML, so the title really was escaped
    ns = "{http://www.w3.org/2000/svg}"
    bars = root.findall(f"{ns}rect")
    assert [b.get("data-layer") for b in bars] == ["0", "1", "2", "3"]
    assert {b.get("data-layer") for b in bars if b.get("class") == "bar selected"} == {"1", "3"}
    assert all(float(b.get("height")) > 0 for b in bars)
    cut = root.find(f"{ns}line[@class='cut']")
    assert cut.get("data-k") == "2" and root.find(f"{ns}title").text == "a <b> & c"
    # The negative bar hangs below the zero axis, the positive ones stand on it.
    zero = float(root.find(f"{ns}line[@class='axis']").get("y1"))
    assert abs(float(bars[3].get("y")) - zero) < 0.2
    assert abs(float(bars[0].get("y")) + float(bars[0].get("height")) - zero) < 0.2
    assert chart.score_chart({}, set(), [], "nmse", False, "empty") == ""


def test_job_charts_one_per_scored_criterion_own_mode_first():
    layers = [{"layer": i, "attn": {"cca_bound": 1.0 + i, "cosine": 0.9}, "block": {"nmse": 0.1 * i}} for i in range(4)]
    spec = {"compression": {"mode": "block", "criterion": "nmse"}}
    charts = chart.job_charts(layers, [{"k": 1, "mode": "block", "layers": [0]}], spec)
    assert [(c["mode"], c["criterion"], c["chosen"]) for c in charts] == [
        ("block", "nmse", True),
        ("attn", "cca", False),
        ("attn", "cosine", False),
    ]
    assert 'class="bar selected" data-layer="0"' in charts[0]["svg"]
    assert "selected" not in charts[1]["svg"].replace("(selected)", "")  # attn: this job selected none


def typed_result(base: dict, outputs: dict[int, dict | None]) -> dict:
    """A job's typed `result` (nbl/result.py's shape) of perplexity and task figures."""

    def metrics(m: dict | None) -> dict | None:
        return (
            None
            if m is None
            else {
                "perplexity": {"wikitext2": {"ppl": m.get("ppl"), "bits_per_byte": None, "tokens": m.get("tokens")}},
                "tasks": {"arc_easy": {"acc": m.get("acc"), "acc_norm": None, "n": None, "ppl": None}},
                "speed": None,
                "params": None,
            }
        )

    return {
        "calibration": {"tokens": 2048, "seconds": 1.5, "cached": False},
        "base": metrics(base),
        "outputs": [output_entry(k, "attn", "nbl", "cca", [1], metrics(m), metrics(base)) for k, m in outputs.items()],
    }


def test_result_table_reads_the_typed_result_deltas_from_the_base_in_readable_numbers():
    result = typed_result(
        {"ppl": 20.0, "acc": 0.6, "tokens": 106200000},
        {8: {"ppl": 30.0, "acc": 0.5, "tokens": 106200000}, 4: {"ppl": 25.0, "acc": None}, 16: None},
    )  # k=16: not measured yet
    table = views.result_table(result)
    assert table == views.result_table(JobResult.model_validate(result))  # JobOut.result, or its JSON
    assert [r["variant"] for r in table["rows"]] == ["base", "k4", "k8"]  # by k, not as listed
    # the evaluation's order; bits_per_byte, measured by none, has no column
    # the evaluation's order, under names and units; the token count (how much, not how well) is no column
    assert [c.label for c in table["columns"]] == ["WikiText-2 perplexity", "ARC-Easy accuracy %"]
    ppl, acc = table["rows"][2]["cells"]
    assert (ppl["value"], ppl["delta"], ppl["relative"], ppl["judge"]) == ("30", "+10", "+50.0%", "worse")
    assert (acc["value"], acc["delta"], acc["relative"], acc["judge"]) == ("50.0%", "-10.0 pts", "-16.7%", "worse")
    assert views.result_table(result)["rows"][1]["cells"][0]["judge"] == "worse"
    _, k4_acc = table["rows"][1]["cells"]
    assert k4_acc["value"] == "—" and k4_acc["delta"] == ""
    assert all(c["delta"] == "" for c in table["rows"][0]["cells"])  # the base has no delta
    assert views.result_table(None) == views.result_table(typed_result(None, {4: None})) == {"columns": [], "rows": []}


def test_timeline_spans_end_where_the_next_stage_starts():
    ev = [
        NS(kind="status", stage=None, message="queued", progress=None, created_at=T0),
        NS(kind="stage", stage="calibrate", message="calibrate", progress=0.0, created_at=T0 + timedelta(seconds=5)),
        NS(kind="progress", stage="calibrate", message=None, progress=0.6, created_at=T0 + timedelta(seconds=20)),
        NS(kind="stage", stage="score", message="score", progress=0.0, created_at=T0 + timedelta(seconds=35)),
    ]
    running = NS(status="running", progress=0.25, finished_at=None)
    spans = views.timeline(ev, running, now=T0 + timedelta(seconds=45))
    assert [(s["stage"], s["seconds"], s["progress"], s["current"], s["done"]) for s in spans] == [
        ("calibrate", 30.0, None, False, True),
        ("score", 10.0, 0.25, True, False),
    ]
    assert [s["fraction"] for s in spans] == [0.75, 0.25]
    done = NS(status="succeeded", progress=1.0, finished_at=T0 + timedelta(seconds=40))
    assert views.timeline(ev, done, now=T0 + timedelta(days=1))[-1]["seconds"] == 5.0
    failed = NS(status="failed", progress=0.3, finished_at=T0 + timedelta(seconds=40))
    (_, last) = views.timeline(
        ev + [NS(kind="progress", stage="score", message=None, progress=0.3, created_at=T0 + timedelta(seconds=38))],
        failed,
        now=T0,
    )
    assert (last["progress"], last["current"], last["done"]) == (0.3, False, False)  # where it stopped
    # since migration 0008: each stage's own fraction, the job's beside it
    (_, last) = views.timeline(
        ev
        + [
            NS(
                kind="progress",
                stage="score",
                message=None,
                progress=0.3,
                stage_progress=0.8,
                created_at=T0 + timedelta(seconds=38),
            )
        ],
        failed,
        now=T0,
    )
    assert last["progress"] == 0.8
    (_, now_) = views.timeline(ev, NS(status="running", progress=0.25, stage_progress=0.5, finished_at=None), now=T0)
    assert (now_["progress"], now_["current"]) == (0.5, True)


def test_recipe_diff_and_layers_side_by_side():
    a = {"model": {"id": "m"}, "compression": {"k": [4], "criterion": "cca"}, "metadata": {"ci": "1"}}
    b = {"model": {"id": "m"}, "compression": {"k": [4, 8], "criterion": "cca"}, "metadata": {"ci": "2"}}
    assert request_diff([a, b]) == [{"field": "compression.ks", "values": ["[4]", "[4, 8]"]}]
    ja = NS(selected_layers=[{"k": 4, "mode": "attn", "layers": [9, 3]}], result=typed_result({"ppl": 10.0}, {}))
    jb = NS(
        selected_layers=[{"k": 4, "mode": "attn", "layers": [3, 5]}, {"k": 8, "mode": "attn", "layers": [1]}],
        result=typed_result({"ppl": 12.5}, {}),
    )
    assert views.selected_side_by_side([ja, jb]) == [
        {"mode": "attn", "k": 4, "layers": [[3, 9], [3, 5]]},
        {"mode": "attn", "k": 8, "layers": [None, [1]]},
    ]
    ja.id, jb.id = "job_a", "job_b"
    (row,) = compare.rows([ja, jb], "job_a")  # against job a: b's base is 2.5 above a's
    assert [(e["job"], e["delta_text"], e["relative"]) for e in row["entries"]] == [
        ("job_a", "", ""),
        ("job_b", "+2.5", "+25.0%"),
    ]
    assert row["entries"][1]["judge"] == "worse" and 'class="cbar worse"' in compare.chart(row, "job a")
    (row,) = compare.rows([ja, jb], "base")  # against their own base: nothing to compare
    assert all(e["delta"] is None for e in row["entries"])


def test_cosine_is_drawn_as_one_minus_cosine_on_a_log_axis():
    layers = [{"layer": i, "attn": {"cosine": c}} for i, c in enumerate((0.999, 0.99, 0.9))]
    (c,) = chart.job_charts(layers, [{"k": 1, "mode": "attn", "layers": [0]}], {"compression": {"criterion": "cosine"}})
    root = ElementTree.fromstring(c["svg"])
    ns = "{http://www.w3.org/2000/svg}"
    heights = [float(b.get("height")) for b in root.findall(f"{ns}rect")]
    assert root.get("data-scale") == "log" and heights[0] < heights[1] < heights[2]  # 0.001 < 0.01 < 0.1
    assert heights[1] - heights[0] == pytest.approx(heights[2] - heights[1], rel=0.01)  # a decade each
    assert "1 − cosine" in c["svg"] and 'class="bar selected" data-layer="0"' in c["svg"]


def test_metric_names_units_and_directions():
    ppl, acc, tok = (metrics.describe(p) for p in ("perplexity/c4/ppl", "tasks/arc_easy/acc", "perplexity/c4/tokens"))
    assert (ppl.label, ppl.better, acc.label, acc.better, tok.shown) == (
        "C4 perplexity",
        -1,
        "ARC-Easy accuracy %",
        1,
        False,
    )
    assert metrics.judge(ppl, -0.5) == "better" and metrics.judge(acc, -0.01) == "worse" and metrics.judge(tok, 5) == ""
    assert metrics.describe("speed/decode_tokens_per_s").label == "decode (tokens/s)"
    assert views.stage_class("evaluate") != views.stage_class("publish") and views.stage_class("x") == "stage-other"


def test_numbers_and_durations():
    assert [views.num(x) for x in (None, 3, 0.61234, 1234.5678, float("inf"))] == ["—", "3", "0.6123", "1,234.6", "—"]
    assert [views.duration(s) for s in (None, 0.25, 42, 61, 3700, 90000)] == [
        "—",
        "0.2s",
        "42s",
        "1m 01s",
        "1h 01m",
        "1d 1h",
    ]
    assert views.artifact_href("/srv/nbl/out") is None and views.artifact_href("/v1/jobs/x") == "/ui/jobs/x"
    assert re.fullmatch(r"[+-].*", views.signed(-0.5)) and views.signed(0.1234, True) == "+12.3%"


def test_a_failed_job_says_why_and_what_the_gates_held_back():
    from service.ui.outcome import outcome

    gates = {
        "passed": False,
        "checks": [
            {"output": "k2", "metric": "perplexity/wikitext2/ppl", "gate": "max_ppl_increase", "allowed": 0.1,
             "base": 20.0, "value": 25.0, "limit": 22.0, "passed": False},
            {"output": "k2", "metric": "tasks/arc_easy/acc", "gate": "max_acc_drop", "allowed": 0.02,
             "base": 0.6, "value": 0.59, "limit": 0.58, "passed": True},
        ],
    }  # fmt: skip
    job = NS(status="failed", artifacts=[], gates=gates, error={"type": "quality", "message": "no output passed"})
    got = outcome(job)
    assert got["error"] == "quality: no output passed" and "failed" in got["why"]
    assert got["held_back"] == [{"output": "k2", "checks": ["WikiText-2 perplexity 25 > 22 (base 20, at most +10%)"]}]
    running = outcome(NS(status="running", artifacts=[], gates=None, error=None))
    assert running == {"error": "", "why": "No outputs yet.", "held_back": []}


def test_compare_bars_show_the_change_from_the_baseline_so_twenty_percent_is_visible():
    m = metrics.describe("perplexity/wikitext2/ppl")

    def entry(variant, value, ref):
        d = None if variant == "base" else value - ref
        return {"job": "job_a", "variant": variant, "value": value, "ref": ref, "delta": d, "relative": "",
                "judge": metrics.judge(m, d), "text": str(value), "delta_text": metrics.delta(m, d)}  # fmt: skip

    row = {"metric": m, "entries": [entry("base", 20.0, 20.0), entry("k2", 24.0, 20.0), entry("k4", 20.2, 20.0)]}
    svg = ElementTree.fromstring(compare.chart(row, "base"))
    ns = "{http://www.w3.org/2000/svg}"
    bars = {r.get("data-variant"): float(r.get("width")) for r in svg.iter(f"{ns}rect")}
    half = (compare.WIDTH - compare.LEFT - compare.RIGHT) / 2
    assert set(bars) == {"k2", "k4"}  # the base is a mark at 0, not a bar
    assert bars["k2"] > 0.8 * half  # +20 %: most of the axis, not a sliver of a bar from 0
    assert bars["k4"] < 0.1 * half and bars["k2"] / bars["k4"] == pytest.approx(20, rel=0.05)
    assert [e.get("data-variant") for e in svg.iter(f"{ns}line") if e.get("class") == "ref"] == ["base"]


def test_a_flat_cca_chart_is_zoomed_so_its_bars_differ():
    """Block-mode CCA bounds 380–408 (issue 38) drew eight bars of one height on an axis from 0."""
    layers = [{"layer": i, "block": {"cca_bound": v}} for i, v in enumerate((380.0, 392.0, 408.0, 385.0))]
    (c,) = chart.job_charts(layers, [], {"compression": {"mode": "block"}})
    root = ElementTree.fromstring(c["svg"])
    ns = "{http://www.w3.org/2000/svg}"
    heights = [float(b.get("height")) for b in root.findall(f"{ns}rect")]
    assert 370 < float(root.get("data-axis-from")) < 380
    assert heights[2] > 5 * heights[0]  # 408 against 380: visibly taller
    assert "lower = more linear" in c["svg"]


def test_quantized_copies_are_rows_beside_their_model():
    """publish.quantize: the job page's table shows base, base + w4a16, k4, k4 + w4a16, each copy's change against
    the unquantized base (the result's own relative)."""
    from nbl.result import job_result

    ppl = "perplexity/wikitext2/ppl"
    stored = {
        "base": {ppl: 20.0},
        "k4": {ppl: 22.0},
        "k4+w4a16": {ppl: 23.0},
        "base+w4a16": {ppl: 20.5},
        "quantization": {"k4/w4a16/bytes": 1e6, "base/w4a16/bytes": 2e6},
    }
    result = job_result({"compression": {"k": 4}}, [{"k": 4, "layers": [1, 2, 3, 4]}], stored)
    table = views.result_table(JobResult.model_validate(result))
    assert [r["variant"] for r in table["rows"]] == ["base", "base+w4a16", "k4", "k4+w4a16"]
    assert views.result_variants(result)["k4+w4a16"]["relative"][ppl] == pytest.approx(0.15)
    assert sorted(["k8", "k4+w8a8", "base+w8a8", "k4", "base", "x"], key=views.variant_order) == [
        "base",
        "base+w8a8",
        "k4",
        "k4+w8a8",
        "k8",
        "x",
    ]
