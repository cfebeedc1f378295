"""Replays a day of jobs on one worker and checks each against the range its estimate gave at submit (issue 38,
item 1's target: at least 7 of 8 jobs inside their range, and no range wider than 2x after the first job of
its kind).

    .venv/bin/python bench/estimate_replay.py [--num-samples 4] [--seq-len 64] [--max-tokens 256]
        [--home /tmp/estimate-replay] [--db URL --broker URL]

The real service, as bench/gemma3_job.sh runs it: SmolLM2-135M imported with `nbl import-gguf`, `nbl serve` and
one `nbl worker` on the embedded default (SQLite, no broker server) in a fresh NBL_HOME, or on Postgres and Redis
with --db/--broker. The jobs, one after another: a fresh job, a cache hit (the same calibration, another k), a
`k: auto`, fold + GGUF, linear + GGUF, a k list with a gate, a clone of the first job, and a fresh calibration
again (another seed: priced from fresh calibrations only, however many cache hits came between). For each,
the range given at submit (POST /v1/jobs' estimate), the seconds it ran (started_at to finished_at), and
each stage's priced and actual seconds (from its stage events). The machine's load (`uptime`) before and
after is in the output: on a shared machine the rates move with it. Writes bench/results/estimate_replay.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BIN = Path(sys.executable).parent
PORT = 8771
WIDTH = 2.0  # the widest range allowed after the first job of its kind


def jobs(args) -> list[tuple[str, str, dict]]:
    """(name, kind, body): the replayed sequence; `kind` groups the jobs whose first one may be unmeasured."""
    cal = {"dataset": "c4", "num_samples": args.num_samples, "seq_len": args.seq_len}
    ev = {"perplexity": ["wikitext2"], "max_tokens": args.max_tokens}
    base = {"model": {"id": "local:smollm2"}, "calibration": cal, "evaluation": ev}
    gguf = ["safetensors", "gguf:q8_0"]
    return [
        ("fresh", "fresh", {**base, "compression": {"mode": "attn", "k": 4}, "publish": {"local_dir": "fresh"}}),
        ("cache hit", "cached", {**base, "compression": {"mode": "attn", "k": 6}, "publish": {"local_dir": "hit"}}),
        (
            "k auto",
            "k auto",
            {
                **base,
                "compression": {"mode": "attn", "k": "auto", "budget": {"max_ppl_increase": 20.0}},
                "selection": {"dataset": "wikitext2", "num_samples": 20},  # enough tokens to resolve the budget
                "publish": {"local_dir": "auto"},
            },
        ),
        (
            "fold + GGUF",
            "fold",
            {
                **base,
                "compression": {"mode": "block", "k": 2, "form": "fold"},
                "publish": {"local_dir": "fold", "formats": gguf},
            },
        ),
        (
            "linear + GGUF",
            "linear",
            {
                **base,
                "compression": {"mode": "attn", "k": 4, "form": "linear"},
                "publish": {"local_dir": "linear", "formats": gguf},
            },
        ),
        (
            "k list + gate",
            "k list",
            {
                **base,
                "compression": {"mode": "attn", "k": [2, 8]},
                "gates": {"max_ppl_increase": {"wikitext2": 20.0}},  # 256 calibration tokens: k=2 passes, k=8 not
                "publish": {"local_dir": "klist"},
            },
        ),
        (
            "clone",
            "cached",
            {**base, "compression": {"mode": "attn", "k": 4}, "publish": {"local_dir": "fresh", "overwrite": True}},
        ),
        (
            "fresh again",
            "fresh",
            {
                **base,
                "calibration": {**cal, "seed": 7},
                "compression": {"mode": "attn", "k": 4},
                "publish": {"local_dir": "fresh2"},
            },
        ),
    ]


def call(method: str, path: str, key: str, body: dict | None = None) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{PORT}{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def seconds(a: str, b: str) -> float:
    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


def stage_seconds(events: list[dict], finished_at: str) -> tuple[dict[str, float], list[float]]:
    """({stage: seconds} from consecutive stage events, the evaluate stage's stage_progress values seen)."""
    stages = [e for e in events if e["kind"] == "stage"]
    out: dict[str, float] = {}
    for e, nxt in zip(stages, stages[1:] + [None]):
        end = nxt["created_at"] if nxt is not None else finished_at
        out[e["stage"]] = out.get(e["stage"], 0.0) + seconds(e["created_at"], end)
    evals = [e["stage_progress"] for e in events if e.get("stage") == "evaluate" and e.get("stage_progress")]
    return out, evals


def run_one(key: str, name: str, kind: str, body: dict) -> dict:
    try:
        job = call("POST", "/v1/jobs", key, body)
    except urllib.error.HTTPError as e:  # refused at submit: a row that says why, and the replay goes on
        detail = json.loads(e.read() or b"{}").get("detail")
        return {
            "name": name,
            "kind": kind,
            "status": f"refused ({e.code})",
            "error": detail,
            "basis": None,
            "statistics_cached": None,
            "low": None,
            "high": None,
            "actual": None,
            "inside": False,
            "width": None,
            "stages": {},
            "evaluate_progress_events": 0,
        }
    est = job.get("estimate") or {}
    while job["status"] not in ("succeeded", "failed", "cancelled"):
        time.sleep(2)
        job = call("GET", f"/v1/jobs/{job['id']}", key)
    events: list[dict] = []
    while True:  # every page of the job's events
        after = f"&after={events[-1]['id']}" if events else ""
        page = call("GET", f"/v1/jobs/{job['id']}/events?limit=1000{after}", key)
        events += page["data"]
        if not page.get("has_more"):
            break
    actual = seconds(job["started_at"], job["finished_at"]) if job.get("started_at") else None
    low, high = (est.get("seconds") or [None, None])[:2]
    per_stage, evals = stage_seconds(events, job["finished_at"])
    return {
        "name": name,
        "kind": kind,
        "id": job["id"],
        "status": job["status"],
        "error": (job.get("error") or {}).get("message"),
        "basis": est.get("basis"),
        "statistics_cached": est.get("statistics_cached"),
        "base_evaluation_cached": est.get("base_evaluation_cached"),
        "low": low,
        "high": high,
        "actual": round(actual, 1) if actual is not None else None,
        "inside": actual is not None and low is not None and low <= actual <= high,
        "width": round(high / low, 2) if low else None,
        "stages": {
            s: {"priced": (est.get("stages") or {}).get(s, {}).get("seconds"), "actual": round(t, 1)}
            for s, t in per_stage.items()
        },
        "evaluate_progress_events": len(evals),
    }


def table(rows: list[dict], meta: dict) -> str:
    lines = [
        "# Estimate replay (issue 38)",
        "",
        f"{meta['command']}",
        "",
        f"Run {meta['started']} to {meta['ended']} on {meta['host']}; load before `{meta['uptime_before']}`, "
        f"after `{meta['uptime_after']}`. Calibration {meta['num_samples']} x {meta['seq_len']} tokens, "
        f"evaluation wikitext2 {meta['max_tokens']} tokens, one worker ({meta['backend']}).",
        "",
        "| # | job | status | basis | stats cached | range at submit (s) | width | actual (s) | inside |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for i, r in enumerate(rows, 1):
        rng = f"{r['low']} – {r['high']}" if r["low"] is not None else "—"
        lines.append(
            f"| {i} | {r['name']} | {r['status']} | {r['basis']} | {r['statistics_cached']} | {rng} | "
            f"{r['width']}x | {r['actual']} | {'yes' if r['inside'] else 'NO'} |"
        )
    lines += [
        "",
        f"**{meta['inside']} of {len(rows)} inside their range** (target 7 of 8); widest range after the first "
        f"job of its kind: {meta['widest_after_first']}x (target at most {WIDTH}x). Target met: {meta['met']}.",
        "",
        "Each stage, priced at submit / actual (s, from the job's stage events):",
        "",
    ]
    for i, r in enumerate(rows, 1):
        parts = ", ".join(f"{s} {v['priced']}/{v['actual']}" for s, v in r["stages"].items())
        lines.append(f"{i}. {r['name']}: {parts}; evaluate progress events {r['evaluate_progress_events']}")
        if r["error"]:
            lines.append(f"   error: {r['error']}")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-samples", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--home", type=Path, default=Path("/tmp/estimate-replay"))
    ap.add_argument("--db", help="NBL_DATABASE_URL (default: the embedded SQLite)")
    ap.add_argument("--broker", help="NBL_BROKER_URL (default: the embedded broker)")
    ap.add_argument("--out", default="estimate_replay")
    ap.add_argument("--jobs", type=int, default=8, help="only the first this many jobs (a smoke run)")
    args = ap.parse_args()
    shutil.rmtree(args.home, ignore_errors=True)
    args.home.mkdir(parents=True)
    env = dict(os.environ, NBL_HOME=str(args.home), PYTHONPATH=str(REPO))
    env.setdefault("NBL_DATA_DIR", str((REPO / ".." / "shared" / "data").resolve()))
    if not Path(env["NBL_DATA_DIR"]).is_dir():
        env["NBL_DATA_DIR"] = "/work/shared/data"
    if args.db:
        env["NBL_DATABASE_URL"] = args.db
    if args.broker:
        env["NBL_BROKER_URL"] = args.broker
    nbl = str(BIN / "nbl")
    sys.path.insert(0, str(REPO / "tests"))
    from testkit.models import smollm2_gguf

    subprocess.run([nbl, "import-gguf", str(smollm2_gguf()), "--name", "smollm2"], env=env, check=True)
    key = (
        subprocess.run(
            [nbl, "admin", "create-key", "--team", "bench", "--create-team"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    logs = {n: open(args.home / f"{n}.log", "w") for n in ("serve", "worker")}
    serve = subprocess.Popen(
        [nbl, "serve", "--port", str(PORT)], env=env, stdout=logs["serve"], stderr=subprocess.STDOUT
    )
    worker = subprocess.Popen([nbl, "worker"], env=env, stdout=logs["worker"], stderr=subprocess.STDOUT)
    meta = {
        "command": "`" + " ".join([".venv/bin/python", "bench/estimate_replay.py", *sys.argv[1:]]) + "`",
        "started": datetime.now().isoformat(timespec="seconds"),
        "host": os.uname().nodename,
        "uptime_before": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        "num_samples": args.num_samples,
        "seq_len": args.seq_len,
        "max_tokens": args.max_tokens,
        "backend": "Postgres + Redis" if args.db else "embedded SQLite, embedded broker",
    }
    rows: list[dict] = []
    try:
        for _ in range(60):  # the API up
            try:
                call("GET", "/v1/jobs", key)
                break
            except OSError:
                time.sleep(1)
        for name, kind, body in jobs(args)[: args.jobs]:
            rows.append(run_one(key, name, kind, body))
            r = rows[-1]
            print(f"{name}: {r['status']} {r['actual']} s in [{r['low']}, {r['high']}] {r['basis']}", flush=True)
    finally:
        for p in (serve, worker):
            p.terminate()
        for p in (serve, worker):
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
    seen: set[str] = set()
    widths = []
    for r in rows:
        if r["kind"] in seen and r["width"] is not None:
            widths.append(r["width"])
        seen.add(r["kind"])
    meta.update(
        ended=datetime.now().isoformat(timespec="seconds"),
        uptime_after=subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
        inside=sum(r["inside"] for r in rows),
        widest_after_first=max(widths, default=None),
    )
    meta["met"] = meta["inside"] >= len(rows) - 1 and all(w <= WIDTH for w in widths)
    out = HERE / "results"
    (out / f"{args.out}.json").write_text(json.dumps({"meta": meta, "jobs": rows}, indent=2) + "\n")
    (out / f"{args.out}.md").write_text(table(rows, meta))
    print(table(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
