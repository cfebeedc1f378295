"""`nbl download` never writes outside DIR nor through a symlink, and a hostile listing is refused
whole: one line, a documented exit code, no traceback (issue 24, finding 13).

Planted symlinks are tested against the real API (a live uvicorn on Postgres) serving an output the
real local publisher wrote; hostile listings, which the real API never sends, come from a small HTTP
server on loopback (the edge of the world: the server side is what is faked).
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

import httpx
import pytest

from cli.main import main
from service.api import create_app

FILES = {
    "config.json": b'{"model_type": "llama"}\n',
    "model.safetensors": b"\x00weights" * 4096,
    "sub/extra.bin": b"extra bytes\n",
}
JOB_ID = "job_" + "1" * 32


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def real(pg_url, settings_for, team_key_for, live_server, tmp_path):
    """A job of team alpha whose k=1 the real local publisher wrote, served by the real API."""
    from service.core.db import make_engine, make_sessionmaker
    from service.jobs import lease, states, store
    from worker.publish.local import LocalDir

    settings = settings_for(pg_url)
    settings.ensure_dirs()
    url = live_server(create_app(settings))
    auth = team_key_for(settings, "alpha")
    job_id = httpx.post(
        f"{url}/v1/jobs", json={"model": {"id": "acme/m"}, "compression": {"k": 1}}, headers=auth
    ).json()["id"]
    staged = tmp_path / "staged"
    for name, data in FILES.items():
        (staged / name).parent.mkdir(parents=True, exist_ok=True)
        (staged / name).write_bytes(data)
    engine = make_engine(settings)
    with make_sessionmaker(engine)() as s:
        token = lease.claim_job(s, job_id, 60)
        published = LocalDir(settings.publish_dir, "alpha", "out", job_id).publish(staged, 1, several=False)
        assert store.save_artifact(s, job_id, 1, published.kind, published.uri, lease_token=token)
        assert states.finish(s, job_id, token, "succeeded")
    engine.dispose()
    return url, auth["Authorization"].split()[1], job_id


def download(capsys, url: str, key: str, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["download", *argv, "--api-url", url, "--api-key", key, "--connect-timeout", "5", "--json"])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_planted_symlinks_are_never_written_through(real, capsys, tmp_path):
    url, key, job_id = real
    dest, outside = tmp_path / "dl", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    victim = outside / "victim"
    victim.write_bytes(b"precious")
    (dest / "config.json.part").symlink_to(victim)  # used to be opened "wb" through the link
    (dest / "model.safetensors").symlink_to(outside / "victim2")
    code, _, err = download(capsys, url, key, job_id, str(dest))
    assert code == 0, err
    assert victim.read_bytes() == b"precious" and not (outside / "victim2").exists()
    for name, data in FILES.items():
        assert not (dest / name).is_symlink() and (dest / name).read_bytes() == data, name
    assert not os.path.lexists(dest / "config.json.part")

    # A folder of the output planted as a symlink out of DIR: refused, nothing written there.
    again = tmp_path / "again"
    again.mkdir()
    (again / "sub").symlink_to(outside, target_is_directory=True)
    code, _, err = download(capsys, url, key, job_id, str(again))
    assert code == 2 and err.startswith("nbl: refusing to write 'sub/extra.bin': 'sub'") and err.count("\n") == 1, err
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]


def test_a_job_with_no_output_exits_4(real, capsys, tmp_path):
    """The README's table: 4 is "refused: ... no output k"; a job with none at all is the same (it was 2)."""
    url, key, _ = real
    queued = httpx.post(
        f"{url}/v1/jobs",
        json={"model": {"id": "acme/m"}, "compression": {"k": 1}},
        headers={"Authorization": f"Bearer {key}"},
    ).json()["id"]
    code, out, err = download(capsys, url, key, queued, str(tmp_path / "x"))
    assert (code, out) == (4, "") and f"job {queued} has no published output (it is queued)" in err, err
    assert not (tmp_path / "x").exists()


class Hostile:
    """An API on loopback that lists `entries` for job JOB_ID's output 1 and serves `body` for any file."""

    def __init__(self, entries: list[dict] | str, body: bytes = b"x"):
        def answer(h: BaseHTTPRequestHandler) -> None:
            if h.path == f"/v1/jobs/{JOB_ID}":
                data = json.dumps(
                    {
                        "id": JOB_ID,
                        "status": "succeeded",
                        "artifacts": [{"k": 1, "kind": "local", "uri": f"/v1/jobs/{JOB_ID}/outputs/1/files"}],
                    }
                ).encode()
            elif h.path == f"/v1/jobs/{JOB_ID}/outputs/1/files":
                data = (
                    entries.encode()
                    if isinstance(entries, str)
                    else json.dumps({"object": "list", "job_id": JOB_ID, "k": 1, "data": entries}).encode()
                )
            else:
                data = body
            h.send_response(200)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            do_GET = answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def entry(path: str, data: bytes = b"x", **kw) -> dict:
    return {"path": path, "size": len(data), "sha256": sha(data), "url": f"/f/{quote(path)}", **kw}


HOSTILE = {
    "nul": ([entry("a\x00b")], "control character"),
    "newline": ([entry("a\nb")], "control character"),
    "5000 characters": ([entry("n" * 5000)], "(cut from 5000 characters): longer than 4096 bytes"),
    "long name": ([entry("d/" + "n" * 300)], "(cut from 302 characters): a name in it is longer than 255 bytes"),
    "long path": ([entry("/".join(["d" * 200] * 30))], "longer than 4096 bytes"),
    "file and folder": ([entry("a"), entry("a/b")], "'a': listed both as a file and as a folder"),
    "twice": ([entry("a"), entry("a")], "listed twice"),
    "dotdot": ([entry("../escape")], "not a plain relative path"),
    "inner dotdot": ([entry("a/../../escape")], "not a plain relative path"),
    "absolute": ([entry("/tmp/escape")], "absolute"),
    "backslash": ([entry("..\\escape")], "backslash"),
    "empty": ([entry("")], "empty"),
    "part of another": ([entry("w"), entry("w.part")], "where 'w' is written while it downloads"),
    "foreign url": ([entry("a", url="http://evil.example/a")], "not a path on the API's own server"),
    "protocol-relative url": ([entry("a", url="//evil.example/a")], "not a path on the API's own server"),
    "negative size": ([entry("a", size=-1)], "not a byte count"),
    "bad sha": ([entry("a", sha256="x" * 64)], "64 lowercase hex digits"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_listing_is_refused_whole(capsys, tmp_path, case):
    entries, message = HOSTILE[case]
    api = Hostile(entries)
    try:
        code, out, err = download(capsys, api.url, "nbl_x", JOB_ID, str(tmp_path / "dl"))
    finally:
        api.close()
    assert (code, out) == (2, "") and err.startswith("nbl: refusing the listed path ") and message in err, err
    assert err.count("\n") == 1
    assert not (tmp_path / "dl").exists() or not any((tmp_path / "dl").iterdir())  # nothing written
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["dl"])


def test_a_listing_that_is_not_one_is_a_usage_error_not_a_traceback(capsys, tmp_path):
    for listing in ("[" * 100_000 + "]" * 100_000, '{"data": [{"path": 1}]}'):  # RecursionError; a bad shape
        api = Hostile(listing)
        try:
            code, out, err = download(capsys, api.url, "nbl_x", JOB_ID, str(tmp_path / "dl"))
        finally:
            api.close()
        assert code == 2 and out == "" and err.startswith("nbl: "), err
        assert not (tmp_path / "dl").exists()


def test_more_bytes_than_listed_are_not_kept(capsys, tmp_path):
    """A server that sends 10 MB for a listed 1-byte file: at most 2 bytes reach the disk, exit 1."""
    api = Hostile([entry("a", b"x")], body=b"y" * 10_000_000)
    try:
        code, _, err = download(capsys, api.url, "nbl_x", JOB_ID, str(tmp_path / "dl"))
    finally:
        api.close()
    assert code == 1 and f"a: sha256 {sha(b'yy')} is not the listed" in err, err  # the listed byte and one more
    assert list((tmp_path / "dl").iterdir()) == []
