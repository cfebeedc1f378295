"""The job's typed `result` as a table (`nbl wait`, `nbl submit --wait`): one row per metric in the
order the evaluation reports them (perplexity, tasks, speed, parameters; never alphabetical), one
column for the base, then for each output its value, its delta and its relative change, in
readable numbers (cli/client/format.py readable: 106,200,000, not 1.062e+08).

Pure functions of the API's JSON (JobOut.result, nbl/result_schema.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from cli.client.format import readable

Getter = Callable[[Mapping | None], float | int | None]


def _get(*path: str) -> Getter:
    def get(metrics: Mapping | None):
        node = metrics
        for part in path:
            node = node.get(part) if isinstance(node, Mapping) else None
        return node

    return get


def rows(result: Mapping) -> list[tuple[str, Getter]]:
    """(label, getter) for every metric the base or any output has, in the evaluation's order."""
    sides = [result.get("base")] + [o.get("metrics") for o in result.get("outputs") or []]
    sides = [s for s in sides if isinstance(s, Mapping)]
    return [(label, get) for label, get in _candidates(sides) if any(get(s) is not None for s in sides)]


def _candidates(sides: list[Mapping]) -> Iterator[tuple[str, Getter]]:

    def names(family: str) -> list[str]:
        return list(dict.fromkeys(n for s in sides for n in (s.get(family) or {})))

    for name in names("perplexity"):
        yield f"{name} ppl", _get("perplexity", name, "ppl")
        yield f"{name} bits/byte", _get("perplexity", name, "bits_per_byte")
    for name in names("tasks"):
        ns = {(s.get("tasks") or {}).get(name, {}).get("n") for s in sides} - {None}
        n = f" (n={readable(ns.pop())})" if len(ns) == 1 else ""
        for m in ("acc", "acc_norm", "ppl"):
            yield f"{name} {m}{n}", _get("tasks", name, m)
    lengths = dict.fromkeys(t for s in sides for t in ((s.get("speed") or {}).get("prefill_tokens_per_s") or {}))
    for t in sorted(lengths, key=lambda t: (not t.isdigit(), int(t) if t.isdigit() else 0, t)):
        yield f"prefill tok/s @{t}", _get("speed", "prefill_tokens_per_s", t)
    for key, label in (
        ("decode_tokens_per_s", "decode tok/s"),
        ("kv_cache_bytes_per_token", "KV cache bytes/token"),
        ("kv_cache_layers", "KV cache layers"),
        ("sparsity", "sparsity"),
    ):
        yield label, _get("speed", key)
    for key, label in (("non_embedding_params", "non-embedding params"), ("params", "params")):
        yield label, _get("params", key)


def signed(x) -> str:
    return "-" if x is None else ("+" if x > 0 else "") + readable(x)


def percent(x) -> str:
    return "-" if x is None else f"{x * 100:+.1f}%"


def result_lines(result: Mapping | None) -> list[str]:
    """The calibration line, then the table; [] when nothing was measured yet."""
    if not result:
        return []
    lines = []
    cal = result.get("calibration")
    if cal:
        src = " (from the statistics cache)" if cal.get("cached") else ""
        lines.append(f"calibration: {readable(cal.get('tokens'))} tokens, {readable(cal.get('seconds'))} s{src}")
    ev = result.get("base_evaluation")
    if ev and ev.get("cached"):
        lines.append(f"base evaluation: reused from the cache ({readable(ev.get('seconds'))} s)")
    elif ev and ev.get("seconds") is not None:
        lines.append(f"base evaluation: {readable(ev.get('seconds'))} s")
    outputs = [o for o in result.get("outputs") or [] if o.get("metrics") is not None]
    table = list(rows(result))
    if not table:
        return lines
    head = ["metric", "base"] + [h for o in outputs for h in (f"k={o['k']}", "delta", "relative")]
    body = []
    for label, get in table:
        cells = [label, readable(get(result.get("base")))]
        for o in outputs:
            cells += [readable(get(o["metrics"])), signed(get(o.get("delta"))), percent(get(o.get("relative")))]
        body.append(cells)
    widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
    fmt = lambda r: "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))  # noqa: E731
    return lines + ([""] if lines else []) + [fmt(head)] + [fmt(r) for r in body]
