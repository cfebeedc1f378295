"""`nbl wait` and `nbl submit` against a real local HTTP server that answers 503/429 with
Retry-After, against a closed port, with a URL without a scheme, and with bad request files:
each ends with its documented exit code and a one-line message, never a hang or a traceback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cli.main import main

REPO = Path(__file__).resolve().parents[2]
# This checkout's cli and nbl_client (an installed nbl_client may be another checkout's).
PYTHONPATH = os.pathsep.join([str(REPO), str(REPO / "clients" / "python")])
JOB_ID = "job_" + "0" * 32


def job(status: str) -> dict:
    return {"id": JOB_ID, "status": status, "stage": None, "progress": 1.0, "spec": {}, "error": None}


class Script:
    """A local API: answers `busy` times with (status, Retry-After), then `final` for every request."""

    def __init__(self, busy: int, final: dict | None, status: int = 503, retry_after: str | None = "1"):
        self.busy, self.final, self.status, self.retry_after = busy, final, status, retry_after
        self.seen: list[tuple[str, str, dict]] = []
        script = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                script.answer(self)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("content-length") or 0))
                script.answer(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, h: BaseHTTPRequestHandler) -> None:
        self.seen.append((h.command, h.path, dict(h.headers)))
        if len(self.seen) <= self.busy:
            status, body = self.status, {"title": "Service Unavailable", "status": self.status}
        elif h.path.startswith(f"/v1/jobs/{JOB_ID}/events"):
            status, body = 200, {"data": [], "last_id": 0}
        else:
            status, body = (201 if h.command == "POST" else 200), self.final
        data = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        if status >= 400 and self.retry_after is not None:
            h.send_header("Retry-After", self.retry_after)
        h.end_headers()
        h.wfile.write(data)


@pytest.fixture
def api_server():
    servers = []

    def start(*args, **kwargs) -> Script:
        servers.append(Script(*args, **kwargs))
        return servers[-1]

    yield start
    for s in servers:
        s.server.shutdown()
        s.server.server_close()


def nbl(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "NBL_API_KEY": "nbl_test"}
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize("status, code", [("succeeded", 0), ("failed", 1), ("cancelled", 2)])
def test_wait_waits_out_503_with_retry_after_then_exits_by_the_job(api_server, capsys, status, code):
    api = api_server(busy=2, final=job(status))
    assert main(["wait", JOB_ID, "--api-url", api.url, "--api-key", "nbl_x", "--quiet", "--json"]) == code
    out = capsys.readouterr()
    assert json.loads(out.out)["status"] == status
    assert "answered 503" in out.err and "retrying in 1.0 s" in out.err  # said even under --quiet
    assert [p for _, p, _ in api.seen[:3]] == [f"/v1/jobs/{JOB_ID}"] * 3  # the same GET, retried


def test_retry_after_is_the_delay(api_server):
    """The delays slept are the server's Retry-After (seconds or an HTTP-date), not a guess."""
    from nbl_client.http import Api, retry_after_s

    api = api_server(busy=2, final=job("succeeded"), retry_after="7")
    slept: list[float] = []
    with Api(api.url, "nbl_x", sleep=slept.append, warn=lambda _: None) as client:
        assert client.request("GET", f"/v1/jobs/{JOB_ID}")["status"] == "succeeded"
    assert slept == [7.0, 7.0]
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert retry_after_s("soon") is None and retry_after_s(None) is None


def test_wait_gives_up_busy_at_its_timeout(api_server, capsys):
    api = api_server(busy=10**6, final=None, retry_after="1")
    assert main(["wait", JOB_ID, "--api-url", api.url, "--api-key", "nbl_x", "--timeout", "1.5", "--quiet"]) == 3
    err = capsys.readouterr().err
    assert "answered 503" in err and "gave up at the --timeout" in err


def test_submit_honours_429_and_resends_the_same_idempotency_key(api_server, capsys, tmp_path):
    api = api_server(busy=2, final=job("queued"), status=429, retry_after="0")
    assert main(["submit", "--model", "acme/m", "--k", "4", "--api-url", api.url, "--api-key", "nbl_x", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "queued"
    assert [m for m, _, _ in api.seen] == ["POST"] * 3
    keys = {h["Idempotency-Key"] for _, _, h in api.seen}
    assert len(keys) == 1 and keys.pop().startswith("nbl-cli-")


def test_wait_and_submit_give_up_on_a_closed_port(tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    for argv in (["wait", JOB_ID, "--quiet"], ["submit", "--model", "acme/m", "--k", "4"]):
        out = nbl(*argv, "--api-url", url, "--connect-timeout", "2")
        assert out.returncode == 3, out.stderr
        last = out.stderr.strip().splitlines()[-1]
        assert last.startswith(f"nbl: cannot reach the API at {url}") and "--connect-timeout 2 s" in last
        assert "retrying" in out.stderr and "Traceback" not in out.stderr  # --quiet is never silent


@pytest.mark.parametrize("url", ["127.0.0.1:8000", "localhost:8000", "ftp://127.0.0.1"])
def test_a_url_without_a_scheme_is_a_usage_error(url):
    for argv in (["wait", JOB_ID], ["submit", "--model", "acme/m"]):
        out = nbl(*argv, "--api-url", url, timeout=20)  # a process: it used to retry forever
        assert out.returncode == 2 and out.stdout == ""
        assert out.stderr.startswith("nbl: error: the API URL must start with http:// or https://")
        assert out.stderr.count("\n") == 1


BAD_FILES = {
    "missing.yaml": None,
    "broken.json": '{"model": {"id": "acme/m"},}',
    "tag.yaml": "model: !!python/object/apply:os.system ['touch PWNED']\n",
    "tag2.yaml": "!!python/object:__main__.X {}\n",
    "broken.yaml": "model: [acme\n",
    "list.yaml": "- model: acme/m\n",
    "list.json": '[{"model": {"id": "acme/m"}}]',
    "empty.yaml": "",
    "latin1.yaml": "model: caf\xe9\n".encode("latin-1"),
    "dir.yaml": "DIR",
    "huge.yaml": b"a: 1\n" * 300_000,  # 1.5 MB: read up to the bound, then refused
    # Nested past the bound (a RecursionError and a traceback before), in both syntaxes:
    "deep.json": '{"model": {"id": "acme/m"}, "metadata": ' + "[" * 5000 + "]" * 5000 + "}",
    "deep.yaml": "model: {id: acme/m}\nmetadata: " + "[" * 5000 + "]" * 5000 + "\n",
    "deep_block.yaml": "model: {id: acme/m}\n" + "".join("  " * i + "a:\n" for i in range(40)) + "  " * 40 + "b: 1\n",
    "deep_block.json": '{"model": {"id": "acme/m"}, "a": ' + '{"a": ' * 40 + "1" + "}" * 41,
    # YAML aliases, refused before anything is built (the expansion is a billion laughs' weapon):
    "alias.yaml": "model: {id: acme/m}\nx: &x [1, 2]\nmetadata: *x\n",
    "merge.yaml": "model: &m {id: acme/m}\ncalibration:\n  <<: *m\n",
    "bigint.yaml": "model: {id: acme/m}\nseed: " + "9" * 5000 + "\n",
    # Values JSON has no form for (a TypeError traceback when the body was sent, or a line without the file):
    "date.yaml": "model: {id: acme/m}\nmetadata: {a: 2001-01-01}\n",
    "binary.yaml": "model: {id: acme/m}\nmetadata: {a: !!binary aGVsbG8=}\n",
    "nan.json": '{"model": {"id": "acme/m"}, "calibration": {"seed": NaN}}',
}

NOT_JSON = [
    ("metadata: {a: 2001-01-01}", "metadata.a: a YAML date (2001-01-01) is not a JSON value; quote it"),
    ("metadata: {a: 2001-12-14t21:59:43.10-05:00}", "metadata.a: a YAML timestamp (2001-12-14 21:59:43.100000-05:00)"),
    ("metadata: {a: !!binary aGVsbG8=}", "metadata.a: a YAML binary value (!!binary) is not a JSON value"),
    ("metadata: !!set {a, b}", "metadata: a YAML set (!!set) is not a JSON value; write a list"),
    ("calibration: {seed: .inf}", "calibration.seed: inf is not a JSON value"),
    ("metadata: {2001-01-01: a}", "metadata: a key: a YAML date (2001-01-01) is not a JSON value"),
    ("evaluation: {tasks: [piqa, 2001-01-01]}", "evaluation.tasks.1: a YAML date"),
]


@pytest.mark.parametrize(
    "line,says", NOT_JSON, ids=[s.split(":")[0] + "-" + str(i) for i, (_, s) in enumerate(NOT_JSON)]
)
def test_submit_names_the_key_of_a_value_json_cannot_carry(tmp_path, capsys, line, says):
    path = tmp_path / "r.yaml"
    path.write_text(f"model: {{id: acme/m}}\n{line}\n")
    assert main(["submit", str(path), "--api-url", "http://127.0.0.1:9", "--api-key", "nbl_x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"nbl: error: {path}: {says}") and err.count("\n") == 1, err


def test_submit_still_sends_quoted_dates_and_the_keys_json_turns_into_text(tmp_path):
    """What json.dumps takes is left as it was: int keys become text, as the API reads them."""
    from cli.client.request_file import load_mapping

    path = tmp_path / "r.yaml"
    path.write_text("model: {id: acme/m}\nmetadata: {a: '2001-01-01', 2024: x}\n")
    assert json.loads(json.dumps(load_mapping(path)))["metadata"] == {"a": "2001-01-01", "2024": "x"}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_submit_turns_a_bad_file_into_one_line(tmp_path, capsys, name):
    path, content = tmp_path / name, BAD_FILES[name]
    if content == "DIR":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content.replace("PWNED", str(tmp_path / "pwned")))
    # The API is never called: a closed URL would show as exit 3.
    assert main(["submit", str(path), "--api-url", "http://127.0.0.1:9", "--api-key", "nbl_x"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.startswith(f"nbl: error: {path}: ") and out.err.count("\n") == 1
    assert not (tmp_path / "pwned").exists()  # safe_load: a tag never runs


def test_submit_reads_a_bounded_amount_of_an_endless_file(capsys):
    """`nbl submit /dev/zero` used to read forever: now the bound ends it with one line and exit 2."""
    assert main(["submit", "/dev/zero", "--api-url", "http://127.0.0.1:9", "--api-key", "nbl_x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nbl: error: /dev/zero: over ") and err.count("\n") == 1


def _limited(gib: int):
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (gib << 30, gib << 30))

    return limit


LAUGHS = "model: {id: acme/m}\nlol0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]\n" for i in range(1, 10)
)


@pytest.mark.parametrize("argv", [["LAUGHS"], ["--model", "acme/m", "--task-file", "/dev/zero"]])
def test_submit_refuses_a_billion_laughs_and_an_endless_task_file_quickly(tmp_path, argv):
    """A YAML file whose aliases expand to 9^9 lists (it ran past 60 s and 645 MB, serialising the
    request), and a task file that never ends: each one line and exit 2, within a 2 GiB address space."""
    if argv == ["LAUGHS"]:
        (tmp_path / "laughs.yaml").write_text(LAUGHS)
        argv = [str(tmp_path / "laughs.yaml")]
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "NBL_API_KEY": "nbl_test"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "submit",
            *argv,
            "--api-url",
            "http://127.0.0.1:9",
            "--connect-timeout",
            "1",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=_limited(2),
    )
    assert out.returncode == 2 and out.stdout == "", out.stderr[-2000:]
    assert out.stderr.startswith("nbl: error: ") and out.stderr.count("\n") == 1, out.stderr[-2000:]
    assert ("aliases (*l0) are not accepted" in out.stderr) or ("/dev/zero: over " in out.stderr)
