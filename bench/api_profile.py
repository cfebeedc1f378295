"""Where a read of the job API spends its time: each part of GET /v1/jobs/{id} and GET /v1/jobs?limit=20
timed alone, in process (no HTTP), against the database in DATABASE_URL seeded by bench/api_load_seed.py.

    DATABASE_URL=... python bench/api_profile.py KEY JOB_ID [repeats=300]

The parts are those of the read as it was (ORM queries, the view, FastAPI's response_model pass) beside
the cached reads that replace them (service/jobs/read_cache.py: one query, the rendered JSON).
Prints CPU microseconds of this process per call (the machine may be shared: CPU time is what bounds a
loaded API's rate, wall time also counts waiting for other work) for: authentication, the job query, the view (artifacts and warnings
queries, the typed result), FastAPI's response validation and JSON serialisation, and the whole
request through the ASGI app (httpx, in process).
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
from fastapi.encoders import jsonable_encoder  # noqa: E402

from service.api.app import create_app  # noqa: E402
from service.core.db import make_engine, make_read_engine, make_sessionmaker  # noqa: E402
from service.core.settings import Settings  # noqa: E402
from service.jobs import read_cache  # noqa: E402
from service.jobs import service as jobs  # noqa: E402
from service.jobs.responses import JobList, JobOut  # noqa: E402
from service.jobs.views import job_view, job_views  # noqa: E402
from service.keys.auth import authenticate  # noqa: E402


def per_call(fn, n: int) -> float:
    fn()
    best = float("inf")
    for _ in range(3):  # the least of three: a shared machine only ever adds
        t = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, (time.process_time() - t) / n * 1e6)
    return best


def main() -> None:
    key, job_id = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 300
    settings = Settings()
    engine = make_engine(settings)
    sessions, reads = make_sessionmaker(engine), make_read_engine(settings, engine)
    s = sessions()
    who = authenticate(s, f"Bearer {key}")
    s.commit()
    job = jobs.get_job(s, who.team_id, job_id)
    rows = jobs.list_jobs(s, who.team_id, limit=20, after=None, statuses=[])[0]
    view, views = job_view(s, job), job_views(s, rows)
    cache = read_cache.RenderedJobs()
    parts = {
        "auth (key lookup + commit)": lambda: (authenticate(s, f"Bearer {key}"), s.commit()),
        "job query": lambda: jobs.get_job(s, who.team_id, job_id),
        "job view (2 queries + result)": lambda: job_view(s, job),
        "JobOut validate + dump_json": lambda: JobOut.model_validate(view).model_dump_json(),
        "JobOut jsonable_encoder": lambda: jsonable_encoder(view),
        "cached read: job_body (auth + version query)": lambda: read_cache.job_body(
            cache, reads, f"Bearer {key}", job_id
        ),
        "cached read: list_body (auth + page, 20)": lambda: read_cache.list_body(
            cache, reads, f"Bearer {key}", limit=20, after=None, statuses=[]
        ),
        "list query (20)": lambda: jobs.list_jobs(s, who.team_id, limit=20, after=None, statuses=[]),
        "list views (20)": lambda: job_views(s, rows),
        "JobList validate + dump_json (20)": lambda: JobList(
            data=views, has_more=False, next_cursor=None
        ).model_dump_json(),
    }
    for name, fn in parts.items():
        print(f"{name:40s} {per_call(fn, n):9.0f} us")
    s.close()
    asyncio.run(http(settings, key, job_id, n))


async def http(settings: Settings, key: str, job_id: str, n: int) -> None:
    app = create_app(settings)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", headers={"Authorization": f"Bearer {key}"}
        ) as c:
            for name, path in (
                ("/healthz", "/healthz"),
                ("GET /v1/jobs/{id}", f"/v1/jobs/{job_id}"),
                ("GET /v1/jobs?limit=20", "/v1/jobs?limit=20"),
            ):
                assert (await c.get(path)).status_code == 200
                best = float("inf")
                for _ in range(3):  # the least of three: a shared machine only ever adds
                    t = time.process_time()
                    for _ in range(n):
                        await c.get(path)
                    best = min(best, (time.process_time() - t) / n * 1e6)
                print(f"{'ASGI ' + name:40s} {best:9.0f} us")


if __name__ == "__main__":
    main()
