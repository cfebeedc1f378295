"""`nbl download` and nbl_client's Client.download end to end, through a live API on Postgres, on a
real job output (tests/testkit/job_output.py): the files arrive byte-equal and checked, a second run
fetches nothing, a partial file is resumed with Range, a file corrupted on the server is caught by
the sha256 check (exit 1, nothing left under its name), and the refusals exit as documented."""

from __future__ import annotations

import hashlib
import json

import pytest
from testkit.job_output import HUB_URL, hub_and_old_rows

from cli.main import main
from nbl_client import ChecksumMismatch, Client, UnsafePath
from nbl_client.download import target


@pytest.fixture
def nbl(job_output, capsys, monkeypatch):
    monkeypatch.setenv("NBL_API_URL", job_output.url)
    monkeypatch.setenv("NBL_API_KEY", job_output.auth["Authorization"].split()[1])

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        code = main(["download", *argv])
        out = capsys.readouterr()
        return code, out.out, out.err

    return run


def published(folder) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in folder.rglob("*")
        if p.is_file() and not p.name.startswith(".nbl-")
    }


def test_nbl_download_end_to_end(job_output, nbl, tmp_path):
    job_id, dest = job_output.job["id"], tmp_path / "dl"
    assert "exit codes (nbl download)" in _help()

    code, _, err = nbl(job_id, str(dest))
    assert code == 2 and "outputs k=1,2: choose one" in err  # several outputs: --k is needed

    code, out, err = nbl(job_id, "--k", "1", str(dest), "--json")
    assert code == 0, err
    report = json.loads(out)
    want = published(job_output.folder(1))
    assert {p.name for p in dest.iterdir()} >= {"model.safetensors", "config.json"}
    assert {str(p.relative_to(dest)): p.read_bytes() for p in dest.rglob("*") if p.is_file()} == want
    assert report["k"] == 1 and report["bytes"] == sum(map(len, want.values()))
    assert {f["path"]: (f["status"], f["sha256"]) for f in report["files"]} == {
        name: ("downloaded", hashlib.sha256(data).hexdigest()) for name, data in want.items()
    }

    # again: everything is there and checked, nothing is fetched
    code, out, _ = nbl(job_id, "--k", "1", str(dest), "--json")
    assert code == 0 and {f["status"] for f in json.loads(out)["files"]} == {"present"}

    # an interrupted download: the first half as a .part, resumed from there
    weights = dest / "model.safetensors"
    half = weights.read_bytes()[: len(want["model.safetensors"]) // 2]
    weights.unlink()
    (dest / "model.safetensors.part").write_bytes(half)
    code, out, err = nbl(job_id, "--k", "1", str(dest))
    assert code == 0, err
    assert "resumed" in err and "model.safetensors" in err and "sha256 checked" in out
    assert weights.read_bytes() == want["model.safetensors"] and not (dest / "model.safetensors.part").exists()


def test_a_file_corrupted_on_the_server_is_caught(job_output, nbl, tmp_path):
    job_id = job_output.job["id"]
    bad = job_output.folder(2) / "model.safetensors"
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one bit flipped after publishing; same size
    bad.write_bytes(bytes(data))
    code, _, err = nbl(job_id, "--k", "2", str(tmp_path / "dl"))
    assert code == 1 and "model.safetensors: sha256" in err and "is not the listed" in err
    assert not (tmp_path / "dl" / "model.safetensors").exists()
    assert not (tmp_path / "dl" / "model.safetensors.part").exists()

    with Client(job_output.url, job_output.auth["Authorization"].split()[1]) as c, pytest.raises(ChecksumMismatch):
        c.download(job_id, 2, tmp_path / "again")


def test_refusals_exit_as_documented(job_output, nbl, tmp_path, monkeypatch):
    job_id = job_output.job["id"]
    code, _, err = nbl(job_id, "--k", "9", str(tmp_path / "x"))
    assert code == 4 and "no published output k=9" in err
    code, _, err = nbl("job_" + "0" * 32, "--k", "1", str(tmp_path / "x"))
    assert code == 4 and "404" in err
    (tmp_path / "file").write_text("")
    assert nbl(job_id, "--k", "1", str(tmp_path / "file"))[0] == 2
    hub = hub_and_old_rows(job_output)
    code, out, err = nbl(hub, "--k", "1", str(tmp_path / "x"))
    assert code == 4 and out.strip() == HUB_URL and "output-on-hub" not in out and "409" in err
    assert nbl(hub, "--k", "2", str(tmp_path / "x"))[0] == 4  # a row from before per-team folders
    monkeypatch.setenv("NBL_API_KEY", job_output.other["Authorization"].split()[1])  # another team
    code, _, err = nbl(job_id, "--k", "1", str(tmp_path / "x"))
    assert code == 4 and f"no job {job_id!r}" in err
    assert not (tmp_path / "x").exists()
    monkeypatch.setenv("NBL_API_URL", "http://127.0.0.1:9")  # nothing listens
    assert nbl(job_id, "--k", "1", str(tmp_path / "x"), "--connect-timeout", "0.5")[0] == 3

    for path in ("../up", "/etc/passwd", "a/../../b", "", "a\\b"):
        with pytest.raises(UnsafePath):
            target(tmp_path, path)
    assert target(tmp_path, "sub/file.bin") == tmp_path / "sub" / "file.bin"


def _help() -> str:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.suppress(SystemExit):
        main(["download", "--help"])
    return buf.getvalue()
