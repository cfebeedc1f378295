"""One report, base vs compressed: the JSON view and the printed table, side by side with deltas.

Deltas are model - base, "relative" is (model - base) / |base|, both computed by nbl/result.py
as for the API's `result`; for throughputs the table also shows the ratio (the speed-up). A suite
(benchmarks/suite.py) adds its average, the one number its paper reports, and names the tasks it skipped.
"""

from __future__ import annotations

from nbl.result import base_evaluation_of, calibration_of, finite, metrics_of, output_entry, relative
from nbl.result import delta as result_delta


def json_view(result: dict) -> dict:
    """The nested metrics of nbl/result.py (perplexity, tasks, speed, params: the API's
    `result` shape), and "suite" ({"name", "average", "tasks_run", "tasks_total", "scores", "skipped"})
    when one was run."""
    out = metrics_of(result)
    if result.get("suite") is not None:
        out["suite"] = finite(result["suite"])
    return out


def _sub(a, b):
    return a - b if isinstance(a, (int, float)) and isinstance(b, (int, float)) else None


def delta(model: dict, base: dict) -> dict:
    """model - base for every number both views have."""
    return result_delta(json_view(model), json_view(base))


def report(model: dict, base: dict | None = None) -> dict:
    out = {**json_view(model), "model": model["model"], "params": model["params"], "seconds": model["seconds"]}
    if base is not None:
        out["base"] = {
            **json_view(base),
            "model": base["model"],
            "params": base["params"],
            "cached": base.get("cached"),
            "seconds": base.get("seconds"),
        }
        out["delta"] = delta(model, base)
        out["relative"] = relative(json_view(model), json_view(base))
    return finite(out)


def compress_result(view: dict, base: dict | None, results: dict[int, dict]) -> dict:
    """`nbl compress --json`'s "result": the API's JobResult shape (nbl/result.py) from its
    calibration, its outputs and the evaluation results (base, and {k: result} of each output)."""
    base_m = metrics_of(base) if base else None
    return {
        "calibration": calibration_of(view["calibration"]),
        "base": base_m,
        "base_evaluation": base_evaluation_of(
            {"cached": float(bool(base.get("cached"))), "seconds": base.get("seconds")}
        )
        if base
        else None,
        "outputs": [
            output_entry(
                o["k"],
                o["mode"],
                o["method"],
                o["criterion"],
                o["replaced_layers"],
                metrics_of(results[o["k"]]) if o["k"] in results else None,
                base_m,
                o.get("form"),
                (results.get(o["k"]) or {}).get("seconds"),
                o,
                o.get("family"),
                o.get("dtype"),
            )
            for o in view["outputs"]
        ],
    }


def _fmt(v, digits: int = 4) -> str:
    if v is None:
        return "-"
    if isinstance(v, int) or digits == 0:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def rows(model: dict, base: dict | None) -> list[tuple[str, str, str, str]]:
    """(metric, base, model, delta) lines of the table."""
    out = []

    def add(label, m, b, digits=4, ratio=False):
        d = _sub(m, b)
        dtxt = "-" if d is None else (f"x{m / b:.2f}" if ratio and b else f"{d:+,.{digits}f}")
        out.append((label, _fmt(b, digits), _fmt(m, digits), dtxt))

    base = base or {"perplexity": {}, "tasks": {}, "speed": None, "params": {}}
    for name, r in model["perplexity"].items():
        b = base["perplexity"].get(name, {})
        add(f"{name} ppl", r["ppl"], b.get("ppl"), 3)
        add(f"{name} bits/byte", r["bits_per_byte"], b.get("bits_per_byte"))
    for name, r in model["tasks"].items():
        b = base["tasks"].get(name, {})
        for m in ("acc", "acc_norm"):
            if r.get(m) is not None:
                add(f"{name} {m} (n={r['n']})", r[m], b.get(m))
    suite = model.get("suite")
    if suite is not None:
        bsuite = base.get("suite") or {}
        add(
            f"{suite['name']} average ({suite['tasks_run']}/{suite['tasks_total']} tasks)",
            suite["average"],
            bsuite.get("average"),
        )
    s, bs = model["speed"], base["speed"] or {}
    if s:
        for t, v in s["prefill_tokens_per_s"].items():
            add(f"prefill tok/s @{t}", v, (bs.get("prefill_tokens_per_s") or {}).get(t), 1, ratio=True)
        add(
            f"decode tok/s ({s['new_tokens']} @{s['decode_context']})",
            s["decode_tokens_per_s"],
            bs.get("decode_tokens_per_s"),
            1,
            ratio=True,
        )
        add("KV cache bytes/token", s["kv_cache_bytes_per_token"], bs.get("kv_cache_bytes_per_token"), 0, ratio=True)
        add("non-embedding params", s["non_embedding_params"], bs.get("non_embedding_params"), 0)
        add("sparsity", s["sparsity"], bs.get("sparsity"))
    else:
        add(
            "non-embedding params",
            model["params"]["non_embedding_params"],
            base["params"].get("non_embedding_params"),
            0,
        )
    return out


def print_table(model: dict, base: dict | None = None) -> None:
    lines = rows(model, base)
    w = max([len(r[0]) for r in lines] + [6])
    print(f"\nmodel: {model['model']['source']}")
    if base is not None:
        print(f"base:  {base['model']['source']}" + ("  (cached)" if base.get("cached") else ""))
        print(f"\n{'metric':<{w}} {'base':>12} {'model':>12} {'delta':>10}")
        for label, b, m, d in lines:
            print(f"{label:<{w}} {b:>12} {m:>12} {d:>10}")
    else:
        print(f"\n{'metric':<{w}} {'value':>12}")
        for label, _, m, _ in lines:
            print(f"{label:<{w}} {m:>12}")
    suite = model.get("suite")
    if suite is not None:
        metrics = ", ".join(f"{t} {s['metric']}" for t, s in suite["scores"].items())
        print(f"\n{suite['name']} average: mean of {metrics or 'no task'}")
        if suite["skipped"]:
            print(f"skipped (data absent): {', '.join(suite['skipped'])}")
