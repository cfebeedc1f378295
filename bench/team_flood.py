"""One team's flood of reads against another team's reads and submits (issue 35, finding 2).

    .venv/bin/python bench/team_flood.py [--backend postgres --backend sqlite] [--flood 200] [--seconds 20]
                                         [--out bench/results/team_flood]

Per backend: a real `nbl serve` process (one uvicorn process, as deployed) on a throwaway database (Postgres
at 127.0.0.1:5432 with Redis as the broker, or the embedded SQLite default with its SQLite broker), teams
alpha and beta with a key each, a finished job of beta's (bench/api_load_seed.py). Then, for `--seconds`:

- alpha: `--flood` connections, each sending GET /v1/models again as soon as it is answered (a 429's
  Retry-After ignored: the worst case), from a process of its own with a hand-written HTTP/1.1 client;
- beta, from 1.5 s in (the flood is then at full strength), in this process: one client each reading its
  job, listing its jobs, reading /v1/usage, and two submitting jobs (POST /v1/jobs, a `local:` model),
  each pausing 0.05 s between requests.

Each request has a 60 s client timeout. Written: `<out>.json` (every figure) and `<out>.md` (the table),
with the machine's load average before each run. On Postgres the most connections seen "idle in
transaction" (pg_stat_activity, sampled every 0.5 s) is reported too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
VENV = REPO / ".venv" / "bin"
PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/test"
TIMEOUT_S = 60.0
BETA_DELAY_S = 1.5
TINY_CONFIG = {
    "model_type": "llama",
    "num_hidden_layers": 4,
    "max_position_embeddings": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
}
SUBMIT = {"model": {"id": "local:tiny"}, "compression": {"k": 1}, "calibration": {"num_samples": 16, "seq_len": 128}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(home: Path, backend: str, db: str | None, extra: list[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBL_") and k not in ("DATABASE_URL", "BROKER_URL")}
    env |= {
        "NBL_HOME": str(home),
        "PYTHONPATH": f"{REPO}:{REPO / 'clients' / 'python'}",
        "HF_HUB_OFFLINE": "1",
        "NBL_MAX_ACTIVE_JOBS_PER_TEAM": "1000000",
        "NBL_MAX_JOBS_PER_TEAM_PER_HOUR": "",
        "NBL_QUEUE": f"nbl-flood-{uuid.uuid4().hex[:6]}",
    }
    env |= dict(item.split("=", 1) for item in extra)  # --server-env NAME=VALUE
    if backend == "postgres":
        env |= {
            "DATABASE_URL": f"postgresql+psycopg://postgres@127.0.0.1:5432/{db}",
            "BROKER_URL": "redis://127.0.0.1:6379/14",
        }
    return env


def _run(env: dict, *args: str) -> str:
    return subprocess.run(args, env=env, cwd=REPO, check=True, capture_output=True, text=True).stdout.strip()


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


class Tally:
    """Statuses and latencies of one kind of request."""

    def __init__(self):
        self.statuses: dict[str, int] = {}
        self.ok_s: list[float] = []  # latencies of 2xx answers
        self.all_s: list[float] = []  # of every answer (timeouts excluded)

    def add(self, status: str, seconds: float | None) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1
        if seconds is not None:
            self.all_s.append(seconds)
            if status.startswith("2"):
                self.ok_s.append(seconds)

    def summary(self) -> dict:
        return {
            "n": sum(self.statuses.values()),
            "statuses": dict(sorted(self.statuses.items())),
            "p50_s": _pct(self.all_s, 0.5),
            "p99_s": _pct(self.all_s, 0.99),
            "max_s": max(self.all_s) if self.all_s else None,
            "ok_p99_s": _pct(self.ok_s, 0.99),
        }


async def _send(client, tally: Tally, method: str, url: str, **kw) -> None:
    import httpx

    t0 = time.monotonic()
    try:
        r = await client.request(method, url, timeout=TIMEOUT_S, **kw)
        tally.add(str(r.status_code), time.monotonic() - t0)
    except httpx.TimeoutException:
        tally.add("timeout", None)
    except httpx.HTTPError as e:
        tally.add(type(e).__name__, time.monotonic() - t0)


async def _raw_client(host: str, port: int, request: bytes, stop: float, tally: Tally) -> None:
    """One flooding connection: HTTP/1.1 keep-alive by hand, a few microseconds of client CPU per request
    (httpx costs the client more than the server's 429), so the flood is the server's load, not this process'."""
    conn = None
    while time.monotonic() < stop:
        t0 = time.monotonic()
        try:
            if conn is None:
                conn = await asyncio.open_connection(host, port)
            reader, writer = conn
            writer.write(request)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), TIMEOUT_S)
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await asyncio.wait_for(reader.readexactly(length), TIMEOUT_S)
            tally.add(head[9:12].decode(), time.monotonic() - t0)
        except asyncio.TimeoutError:
            tally.add("timeout", None)
            conn = None
        except (OSError, asyncio.IncompleteReadError, StopIteration) as e:
            tally.add(type(e).__name__, time.monotonic() - t0)
            conn = None


def _flood(host: str, port: int, key: str, clients: int, seconds: float, out) -> None:
    """alpha's flood, in a process of its own (the measuring process keeps its own CPU and event loop)."""
    request = f"GET /v1/models HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n\r\n".encode()
    tally = Tally()

    async def run():
        stop = time.monotonic() + seconds
        await asyncio.gather(*(_raw_client(host, port, request, stop, tally) for _ in range(clients)))

    asyncio.run(run())
    out.put(tally.summary())


async def _beta(base: str, beta: str, job: str, seconds: float, pg_db: str | None) -> dict:
    import httpx

    tallies = {
        name: Tally()
        for name in ("beta GET /v1/jobs/{id}", "beta GET /v1/jobs", "beta GET /v1/usage", "beta POST /v1/jobs")
    }
    stop = time.monotonic() + seconds
    idle_in_tx = [0]

    async def loop(client, name, method, url, **kw):
        while time.monotonic() < stop:
            await _send(client, tallies[name], method, url, headers={"Authorization": f"Bearer {beta}"}, **kw)
            await asyncio.sleep(0.05)

    async def watch_pg():
        import psycopg

        async with await psycopg.AsyncConnection.connect(PG_ADMIN, autocommit=True) as conn:
            while time.monotonic() < stop:
                cur = await conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND state = 'idle in transaction'",
                    (pg_db,),
                )
                idle_in_tx[0] = max(idle_in_tx[0], (await cur.fetchone())[0])
                await asyncio.sleep(0.5)

    async with httpx.AsyncClient(base_url=base) as client:
        tasks = [
            loop(client, "beta GET /v1/jobs/{id}", "GET", f"/v1/jobs/{job}"),
            loop(client, "beta GET /v1/jobs", "GET", "/v1/jobs?limit=20"),
            loop(client, "beta GET /v1/usage", "GET", "/v1/usage"),
        ]
        tasks += [loop(client, "beta POST /v1/jobs", "POST", "/v1/jobs", json=SUBMIT) for _ in range(2)]
        if pg_db:
            tasks.append(watch_pg())
        await asyncio.gather(*tasks)
    out = {name: t.summary() for name, t in tallies.items()}
    if pg_db:
        out["max idle in transaction"] = idle_in_tx[0]
    return out


def _load(port: int, alpha: str, beta: str, job: str, flood: int, seconds: float, pg_db: str | None) -> dict:
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    flooding = ctx.Process(target=_flood, args=("127.0.0.1", port, alpha, flood, seconds, out))
    flooding.start()
    time.sleep(BETA_DELAY_S)
    result = asyncio.run(_beta(f"http://127.0.0.1:{port}", beta, job, seconds - BETA_DELAY_S, pg_db))
    alpha_result = out.get(timeout=seconds + 2 * TIMEOUT_S)
    flooding.join()
    return {"alpha GET /v1/models": alpha_result, **result}


def run_backend(backend: str, flood: int, seconds: float, extra_env: list[str]) -> dict:
    import httpx
    import psycopg

    home = Path(tempfile.mkdtemp(prefix="nbl-flood-"))
    db = f"nbl_flood_{uuid.uuid4().hex[:8]}" if backend == "postgres" else None
    admin = psycopg.connect(PG_ADMIN, autocommit=True) if db else None
    if admin:
        admin.execute(f'CREATE DATABASE "{db}"')
    env = _env(home, backend, db, extra_env)
    server = None
    try:
        (home / "models" / "tiny").mkdir(parents=True)
        (home / "models" / "tiny" / "config.json").write_text(json.dumps(TINY_CONFIG))
        alpha = _run(env, str(VENV / "nbl"), "admin", "create-key", "--team", "alpha", "--create-team").splitlines()[-1]
        beta = _run(env, str(VENV / "nbl"), "admin", "create-key", "--team", "beta", "--create-team").splitlines()[-1]
        job = _run(env, str(VENV / "python"), str(HERE / "api_load_seed.py"), beta, "3").splitlines()[-1]
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        log = open(home / "api.log", "w")
        server = subprocess.Popen(
            [str(VENV / "nbl"), "serve", "--port", str(port), "--log-level", "warning"],
            env=env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"nbl serve did not start: {(home / 'api.log').read_text()[-2000:]}")
            time.sleep(0.3)
        loadavg = os.getloadavg()
        result = _load(port, alpha, beta, job, flood, seconds, db)
        return {"backend": backend, "load_before": [round(x, 2) for x in loadavg], "results": result}
    finally:
        if server is not None:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
        if admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
            admin.close()
        shutil.rmtree(home, ignore_errors=True)


def _fmt(s: float | None) -> str:
    return "-" if s is None else f"{s:.3f}"


def markdown(report: dict) -> str:
    lines = [
        f"# One team's flood of reads against another team ({report['label']})",
        "",
        f"command: `{report['command']}` ({report['when']}, commit {report['commit']}, {os.cpu_count()} CPUs)",
        "",
        f"alpha: {report['flood']} connections sending GET /v1/models back to back for {report['seconds']} s "
        f"(Retry-After ignored; a process of its own); beta from {BETA_DELAY_S} s: one client per read, two "
        f"submitting (POST /v1/jobs), 0.05 s between requests; client timeout {TIMEOUT_S:.0f} s. "
        "p50/p99/max over every answer (timeouts excluded, counted as `timeout`).",
        "",
    ]
    for run in report["runs"]:
        lines += [
            f"## {run['backend']} (load average before: {', '.join(map(str, run['load_before']))})",
            "",
            "| requests | n | statuses | p50 s | p99 s | max s |",
            "|---|---|---|---|---|---|",
        ]
        for name, r in run["results"].items():
            if isinstance(r, dict):
                statuses = ", ".join(f"{k}: {v}" for k, v in r["statuses"].items())
                lines.append(
                    f"| {name} | {r['n']} | {statuses} | {_fmt(r['p50_s'])} | {_fmt(r['p99_s'])} | {_fmt(r['max_s'])} |"
                )
        if "max idle in transaction" in run["results"]:
            lines += ["", f"Most connections idle in transaction at once: {run['results']['max idle in transaction']}"]
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", action="append", choices=["postgres", "sqlite"])
    ap.add_argument("--flood", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--label", default="")
    ap.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="more environment for `nbl serve` (NBL_MAX_READS_PER_TEAM=8, ...)",
    )
    ap.add_argument("--out", default=str(HERE / "results" / "team_flood"))
    args = ap.parse_args()
    commit = (
        subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
        or "?"
    )
    report = {
        "label": args.label or commit,
        "command": " ".join(["bench/team_flood.py", *sys.argv[1:]]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": commit,
        "flood": args.flood,
        "seconds": args.seconds,
        "runs": [],
    }
    for backend in args.backend or ["postgres", "sqlite"]:
        report["runs"].append(run_backend(backend, args.flood, args.seconds, args.server_env))
        print(json.dumps(report["runs"][-1], indent=1), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
    out.with_suffix(".md").write_text(markdown(report))
    print(markdown(report))


if __name__ == "__main__":
    main()
