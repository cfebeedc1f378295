"""What a dead delivery costs a real `nbl worker`: N jobs cancelled while queued, whose broker
messages are still in the queue (a team that submits and cancels in a loop leaves one each).

Creates a throwaway Postgres database and a Redis queue of its own, N cancelled jobs, starts
`nbl worker` (prefork on Postgres + Redis, as deployed), waits until it is ready, sends the N
messages and times until the worker has dropped them all (its "delivery dropped" log lines).
Prints seconds per dead delivery and the pool children it went through.

    PYTHONPATH=$PWD .venv/bin/python bench/dead_deliveries.py [N]   (Postgres at 127.0.0.1:5432, Redis at :6379)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PG_ADMIN = os.environ.get("NBL_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS = os.environ.get("NBL_TEST_REDIS_URL", "redis://127.0.0.1:6379/14")


def children(pid: int) -> set[int]:
    kids = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.add(int(stat.parent.name))
    return kids


def main(n: int) -> None:
    import psycopg
    from sqlalchemy.engine import make_url

    from nbl.request import JobCreate
    from service.core.celery_app import make_celery
    from service.core.db import make_engine, make_sessionmaker
    from service.core.migrate import upgrade
    from service.core.settings import Settings
    from service.jobs import service as jobs
    from service.jobs.queue import send_run_job
    from service.jobs.submit import create_job
    from service.keys.auth import Principal, get_or_create_team

    name = f"nbl_bench_{uuid.uuid4().hex[:10]}"
    admin = psycopg.connect(PG_ADMIN.replace("postgresql+psycopg://", "postgresql://"), autocommit=True)
    admin.execute(f'CREATE DATABASE "{name}"')
    url = make_url(PG_ADMIN).set(database=name).render_as_string(hide_password=False)
    home = Path(tempfile.mkdtemp(prefix="nbl-bench-"))
    env = {
        "NBL_HOME": str(home),
        "DATABASE_URL": url,
        "BROKER_URL": REDIS,
        "NBL_QUEUE": name,
        "NBL_RECONCILE_INTERVAL": "3600",
    }
    worker = None
    try:
        upgrade(url)
        settings = Settings(**env)
        engine = make_engine(settings)
        with make_sessionmaker(engine)() as s:
            team, _ = get_or_create_team(s, "bench")
            who = Principal(team_id=team.id, team_name="bench", max_active_jobs=None)
            spec = JobCreate.model_validate({"model": {"id": "local:none"}, "compression": {"k": 1}})
            ids = []
            for _ in range(n):
                job, _ = create_job(s, who, spec, None, settings)
                jobs.cancel_job(s, team.id, job.id)
                ids.append(job.id)
        engine.dispose()
        log = home / "worker.log"
        worker = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "worker"],
            cwd=REPO,
            start_new_session=True,
            env={**os.environ, **env, "PYTHONPATH": str(REPO)},
            stdout=open(log, "w"),
            stderr=subprocess.STDOUT,
        )
        while "ready." not in log.read_text():
            if worker.poll() is not None:
                sys.exit(f"the worker exited:\n{log.read_text()}")
            time.sleep(0.2)
        seen = set(children(worker.pid))
        celery = make_celery(settings)
        t0 = time.monotonic()
        for job_id in ids:
            send_run_job(celery, job_id)
        while log.read_text().count("delivery dropped") < n:
            seen |= children(worker.pid)
            if worker.poll() is not None or time.monotonic() - t0 > 60 * n:
                sys.exit(f"the worker did not drop {n} deliveries:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)
        elapsed = time.monotonic() - t0
        print(
            f"{n} dead deliveries dropped in {elapsed:.2f} s: {elapsed / n:.3f} s each; pool children seen: {len(seen)}"
        )
    finally:
        if worker is not None:
            os.killpg(worker.pid, 9)
            worker.wait()
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        import redis

        redis.Redis.from_url(REDIS).delete(name)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
