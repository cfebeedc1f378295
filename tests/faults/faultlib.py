"""The fault tests' harness: real servers, real processes, faults injected from outside.

- `private_redis()` / `private_postgres()`: a server of this test's own, on a free port, that a test
  may stop and start without touching the shared instances (Postgres runs as the `postgres` OS
  user, from the binaries under /usr/lib/postgresql/*/bin).
- `Cluster`: one deployment of the service: the API in-process (TestClient), `nbl worker`
  processes wrapped by fault_worker.py (or plain), an `nbl reconcile` process, all on one
  DATABASE_URL and BROKER_URL (EMBEDDED: both unset, the SQLite default under NBL_HOME), with short
  leases so a lost worker is noticed in seconds. Every process runs in its
  own process group and is killed at teardown.
- `deadline(s)`: a hard time limit for a test (SIGALRM, by conftest.py's `hard_timeout`, which a module asks for
  with `pytest.mark.usefixtures`), so a hang fails instead of blocking CI.

Its fixtures (a private Redis, the tiny model, the cluster factory, the time limit) are in conftest.py.

Waits poll with deadlines; nothing sleeps a fixed time and hopes.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from testkit.models import DATA_DIR

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
TERMINAL = ("succeeded", "failed", "cancelled")

# A job that runs in seconds: the tiny random Llama (4 layers), 10 x 32 tokens of C4, no evaluation.
JOB = {
    "model": {"id": "local:tiny"},
    "calibration": {"dataset": "c4", "num_samples": 10, "seq_len": 32},
    "compression": {"mode": "attn", "k": 1},
    "evaluation": {"perplexity": []},
}


def job_body(name: str, fault: str | None = None, seed: int = 0) -> dict:
    """A distinct `seed` gives a job its own statistics cache entry (a job that must calibrate, not
    find another job's statistics)."""
    return {
        **JOB,
        "calibration": {**JOB["calibration"], "seed": seed},
        "publish": {"local_dir": name},
        "metadata": {"fault": fault} if fault else {},
    }


# --- time ----------------------------------------------------------------------------------------


def deadline(seconds: int):
    """Decorator: the test fails with TimeoutError after `seconds` (the `hard_timeout` fixture)."""

    def mark(fn):
        fn.deadline_s = seconds
        return fn

    return mark


def wait_until(check: Callable[[], object], timeout: float, what: str, every: float = 0.1):
    """Poll `check` until it returns something truthy (returned); AssertionError after `timeout`."""
    end = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


# --- private servers -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """redis-server on a free port with no persistence: a restart loses every message, as a broker
    restart without AOF does."""

    def __init__(self, workdir: Path):
        self.port, self.workdir, self.proc = free_port(), workdir, None
        self.url = f"redis://127.0.0.1:{self.port}/0"
        workdir.mkdir(parents=True, exist_ok=True)

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=open(self.workdir / "redis.log", "a"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until(self.ping, 10, "redis-server to start")

    def ping(self) -> bool:
        import redis

        try:
            return redis.Redis(port=self.port, socket_timeout=1).ping()
        except redis.RedisError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # like a crash: nothing is saved (there is no persistence anyway)
            self.proc.wait(timeout=10)
        self.proc = None


class PostgresServer:
    """A throwaway cluster (initdb, trust auth) in a directory owned by the `postgres` OS user."""

    def __init__(self, root: Path):
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
        if not bins:
            pytest.fail("no Postgres binaries under /usr/lib/postgresql/*/bin", pytrace=False)
        self.bin = Path(bins[-1]).parent
        self.root, self.port = root, free_port()
        self.data, self.log = root / "data", root / "postgres.log"
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, *cmd: str, timeout: float = 60) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *cmd], check=True, timeout=timeout, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def init(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres", "postgres")
        self._as_postgres(
            str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"
        )

    def start(self) -> None:
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=off"
        self._as_postgres(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w", "-t", "30", "start"
        )

    def stop(self) -> None:
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "-t", "30", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()


@contextlib.contextmanager
def private_postgres() -> Iterator[PostgresServer]:
    root = Path(tempfile.mkdtemp(prefix="nbl-pg-", dir="/tmp"))  # postgres must be able to reach it
    os.chmod(root, 0o755)
    server = PostgresServer(root / "cluster")
    try:
        server.init()
        server.start()
        yield server
    finally:
        if server.running():
            with contextlib.suppress(Exception):
                server.stop()
        shutil.rmtree(root, ignore_errors=True)


# --- the deployment under test -------------------------------------------------------------------


EMBEDDED = None  # Cluster(database_url=EMBEDDED, broker_url=EMBEDDED): the default SQLite DB / SQLite broker


class Cluster:
    def __init__(self, tmp_path: Path, database_url: str | None, broker_url: str | None, tiny_model: Path, **env: str):
        from service.core.migrate import ensure_schema
        from service.core.settings import Settings

        self.tmp = tmp_path
        self.fault_dir, self.logs = tmp_path / "faults", tmp_path / "logs"
        self.fault_dir.mkdir(parents=True)
        self.logs.mkdir()
        # None: unset, so every process derives the embedded default from NBL_HOME, as a user's does
        urls = {name: url for name, url in (("DATABASE_URL", database_url), ("BROKER_URL", broker_url)) if url}
        self.unset = [name for name in ("DATABASE_URL", "BROKER_URL") if name not in urls]
        self.env = {
            "NBL_HOME": str(tmp_path / "home"),
            **urls,
            "NBL_QUEUE": "nbl-faults",
            "NBL_DATA_DIR": str(DATA_DIR),
            "NBL_FAULT_DIR": str(self.fault_dir),
            "NBL_LEASE_SECONDS": "5",
            "NBL_MAX_ATTEMPTS": "3",
            "NBL_RECONCILE_INTERVAL": "0.5",
            "NBL_REDISPATCH_AFTER": "600",
            "NBL_DB_RETRY_SECONDS": "60",
            "NBL_PUBLISH_TIMEOUT": "1",
            "NBL_FAULT_SKIP_LOADCHECK": "1",
            **env,
        }
        self.settings = Settings(**self.env)
        self.settings.ensure_dirs()
        if database_url is None:
            ensure_schema(self.settings)  # what `nbl serve` does on the embedded default
        shutil.copytree(tiny_model, self.settings.models_dir / "tiny")
        self.procs: dict[str, subprocess.Popen] = {}
        self._client = None

    # processes
    def _spawn(self, name: str, cmd: list[str], **env: str) -> subprocess.Popen:
        penv = {**os.environ, **self.env, **env, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        for unset in self.unset:
            penv.pop(unset, None)
        proc = subprocess.Popen(
            cmd,
            cwd=REPO,
            env=penv,
            stdout=open(self.logs / f"{name}.log", "a"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs[name] = proc
        return proc

    def start_worker(self, name: str = "worker", **env: str) -> subprocess.Popen:
        return self._spawn(name, [sys.executable, str(HERE / "fault_worker.py"), "--loglevel", "INFO"], **env)

    def start_nbl_worker(self, name: str = "worker", **env: str) -> subprocess.Popen:
        """The real `nbl worker`, with no fault hooks."""
        return self._spawn(name, [sys.executable, "-m", "cli.main", "worker", "--loglevel", "INFO"], **env)

    def start_reconciler(self, name: str = "reconciler", **env: str) -> subprocess.Popen:
        return self._spawn(name, [sys.executable, "-m", "cli.main", "reconcile"], **env)

    def kill(self, name: str) -> None:
        """SIGKILL the process and everything it started (a whole worker: parent and pool child)."""
        proc = self.procs.pop(name)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)

    def log(self, name: str) -> str:
        path = self.logs / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def logs_tail(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted(self.logs.iterdir()))

    def close(self) -> None:
        for name in list(self.procs):
            self.kill(name)
        if self._client is not None:
            self._client.__exit__(None, None, None)
            self._client = None

    # the API
    @property
    def client(self):
        if self._client is None:
            from fastapi.testclient import TestClient

            from service.api import create_app

            self._client = TestClient(create_app(self.settings), raise_server_exceptions=False)
            self._client.__enter__()
        return self._client

    def auth(self, team: str = "faults") -> dict[str, str]:
        from service.core.db import make_engine, make_sessionmaker
        from service.keys.auth import create_key, get_or_create_team

        engine = make_engine(self.settings)
        with make_sessionmaker(engine)() as s:
            key, _ = create_key(s, get_or_create_team(s, team)[0])
        engine.dispose()
        return {"Authorization": f"Bearer {key}"}

    def submit(self, auth: dict, name: str, fault: str | None = None, seed: int = 0) -> str:
        resp = self.client.post("/v1/jobs", json=job_body(name, fault, seed), headers=auth)
        assert resp.status_code == 201, resp.text
        return resp.json()["id"]

    def job(self, auth: dict, job_id: str) -> dict:
        resp = self.client.get(f"/v1/jobs/{job_id}", headers=auth)
        assert resp.status_code == 200, resp.text
        return resp.json()

    def events(self, auth: dict, job_id: str) -> list[dict]:
        return self.client.get(f"/v1/jobs/{job_id}/events", headers=auth, params={"limit": 1000}).json()["data"]

    def wait_status(self, auth: dict, job_id: str, statuses=TERMINAL, timeout: float = 60) -> dict:
        def check():
            for name, proc in self.procs.items():
                if proc.poll() is not None and name.startswith(("worker", "reconciler")):
                    raise AssertionError(f"{name} exited ({proc.returncode})\n{self.logs_tail()}")
            job = self.job(auth, job_id)
            return job if job["status"] in statuses else None

        try:
            return wait_until(check, timeout, f"job {job_id} to be {'/'.join(statuses)}", every=0.2)
        except AssertionError as e:
            raise AssertionError(f"{e}: {self.job(auth, job_id)}\n{self.logs_tail()}") from None

    # what the fault worker recorded
    def marker(self, job_id: str, suffix: str) -> Path:
        return self.fault_dir / f"{job_id}{suffix}"

    def wait_held(self, job_id: str, timeout: float = 60) -> int:
        held = self.marker(job_id, ".held")
        try:
            wait_until(held.exists, timeout, f"job {job_id} to reach calibration")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.logs_tail()}") from None
        return int(wait_until(lambda: held.read_text().strip(), 5, "the held pid"))

    def release(self, job_id: str) -> None:
        self.marker(job_id, ".go").touch()

    def recorded(self, log: str, job_id: str, what: str | None = None) -> int:
        path = self.fault_dir / log
        lines = path.read_text().splitlines() if path.exists() else []
        return sum(1 for line in lines if line.split()[0] == job_id and (what is None or line.split()[-2] == what))
