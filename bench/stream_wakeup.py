"""How late an open event stream sends a job's new event: Redis pub/sub wake-up against polling.

    .venv/bin/python bench/stream_wakeup.py [--events 20] [--redis redis://127.0.0.1:6379/15]

A real uvicorn server (in this process) on SQLite in a throwaway NBL_HOME; a running job; one client
following GET /v1/jobs/{id}/events/stream; a writer that commits a log event every 0.37 s through
sessions built as the worker builds them (service/core/wakeup.attach). Latency: the client's receipt
minus the commit's end, per event. Two runs with NBL_STREAM_POLL_S=1 (the default): with the wake-up
(NBL_WAKEUP_URL=the Redis), and without (empty). Writes bench/results/stream_wakeup.{md,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "clients" / "python")]


def one_run(wakeup: str, n: int, home: Path) -> list[float]:
    import httpx
    import uvicorn
    from testkit.ui_seed import seed_job

    from nbl_client.stream import parse
    from service.api import create_app
    from service.core.db import make_engine, make_sessionmaker
    from service.core.migrate import ensure_schema
    from service.core.settings import Settings
    from service.core.wakeup import attach, publisher_for
    from service.jobs import store
    from service.keys.auth import create_key, get_or_create_team

    settings = Settings(
        home=home,
        database_url=f"sqlite:///{home}/nbl.db",
        broker_url=f"sqla+sqlite:///{home}/b.db",
        stream_poll_s=1.0,
        wakeup_url=wakeup,
    )
    settings.ensure_dirs()
    ensure_schema(settings)
    engine = make_engine(settings)
    worker = attach(make_sessionmaker(engine), publisher_for(settings))
    with worker() as s:
        key, _ = create_key(s, get_or_create_team(s, "bench")[0])
    job = seed_job(worker, settings, key, finish=None)
    app = create_app(settings)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.02)
    while wakeup and not app.state.waker.subscribed:
        time.sleep(0.02)
    url = f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    committed: dict[str, float] = {}
    late: list[float] = []

    def write():
        time.sleep(0.5)
        for i in range(n):
            with worker() as s:
                store.add_event(s, job, "log", f"bench {i}")
            committed[f"bench {i}"] = time.monotonic()
            time.sleep(0.37)

    threading.Thread(target=write, daemon=True).start()
    with httpx.stream(
        "GET", f"{url}/v1/jobs/{job}/events/stream", headers={"Authorization": f"Bearer {key}"}, timeout=30
    ) as r:
        for kind, data, _ in parse(r.iter_lines()):
            if kind != "message":
                continue
            msg = json.loads(data)["message"]
            if msg in committed or msg.startswith("bench "):
                while msg not in committed:  # received before the writer noted its commit's end
                    time.sleep(0.001)
                late.append(max(time.monotonic() - committed[msg], 0.0))
                if len(late) == n:
                    break
    server.should_exit = True
    engine.dispose()
    return late


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=20)
    ap.add_argument("--redis", default="redis://127.0.0.1:6379/15")
    args = ap.parse_args()
    rows = []
    for name, wakeup in (("Redis wake-up", args.redis), ("polling only", "")):
        home = Path(tempfile.mkdtemp(prefix="nbl-wake-"))
        try:
            late = sorted(one_run(wakeup, args.events, home))
        finally:
            shutil.rmtree(home, ignore_errors=True)
        rows.append(
            {
                "run": name,
                "events": len(late),
                "median_s": round(statistics.median(late), 3),
                "max_s": round(late[-1], 3),
                "min_s": round(late[0], 3),
            }
        )
        print(rows[-1])
    out = HERE / "results" / "stream_wakeup"
    out.with_suffix(".json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))
    load = " ".join(open("/proc/loadavg").read().split()[:3]) if os.path.exists("/proc/loadavg") else "?"
    lines = [
        "# Event stream latency: Redis wake-up against polling",
        "",
        f"`.venv/bin/python bench/stream_wakeup.py --events {args.events}` (SQLite, uvicorn in-process, "
        f"NBL_STREAM_POLL_S=1, an event committed every 0.37 s; 2 shared cores, load average {load}). Latency: "
        "the client's receipt of the event minus the end of its commit.",
        "",
        "| run | events | median | min | max |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [f"| {r['run']} | {r['events']} | {r['median_s']} s | {r['min_s']} s | {r['max_s']} s |" for r in rows]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
