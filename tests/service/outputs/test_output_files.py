"""GET /v1/jobs/{id}/outputs/{k}/files[/{path}] on a real job output (tests/testkit/job_output.py):
the listing against the files on disk, whole and ranged downloads, what is refused (traversal in
every spelling, symlinks, the bookkeeping files, another team), a Hub output, old artifact rows,
and an output published before manifests."""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import random
from urllib.parse import urlsplit

import pytest
from testkit.job_output import hub_and_old_rows
from testkit.service_lib import assert_problem

from service.outputs.ranges import Unsatisfiable, byte_range


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def raw_get(s, path: str, headers: dict) -> tuple[int, bytes]:
    """The request line exactly as given (httpx would resolve `..` before sending)."""
    u = urlsplit(s.url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request("GET", path, headers=headers)
    resp = conn.getresponse()
    body = resp.read()
    conn.close()
    return resp.status, body


def test_list_and_download_match_the_published_files(job_output):
    s, job_id = job_output, job_output.job["id"]
    assert {a["k"]: a["uri"] for a in s.job["artifacts"]} == {k: f"/v1/jobs/{job_id}/outputs/{k}/files" for k in (1, 2)}
    listing = s.get(f"/v1/jobs/{job_id}/outputs/1/files").json()
    on_disk = {str(p.relative_to(s.folder(1))): p.read_bytes() for p in s.folder(1).rglob("*") if p.is_file()}
    assert ".nbl-files.json" in on_disk  # the manifest, written by the publisher
    assert {f["path"]: (f["size"], f["sha256"]) for f in listing["data"]} == {
        name: (len(data), sha(data)) for name, data in on_disk.items() if not name.startswith(".nbl-")
    }
    assert {"model.safetensors", "config.json", "README.md"} <= {f["path"] for f in listing["data"]}
    assert listing["job_id"] == job_id and listing["k"] == 1

    for f in listing["data"]:
        r = s.get(f["url"])
        assert r.status_code == 200 and r.content == on_disk[f["path"]], f["path"]
        assert r.headers["etag"] == f'"{f["sha256"]}"' and r.headers["accept-ranges"] == "bytes"
        assert int(r.headers["content-length"]) == f["size"]


def test_ranges(job_output):
    s = job_output
    url = f"/v1/jobs/{s.job['id']}/outputs/1/files/model.safetensors"
    data = (s.folder(1) / "model.safetensors").read_bytes()
    n = len(data)
    for header, first, last in (
        ("bytes=0-9", 0, 9),
        ("bytes=100-1099", 100, 1099),
        ("bytes=-7", n - 7, n - 1),
        (f"bytes={n - 5}-", n - 5, n - 1),
        (f"bytes=10-{n + 50}", 10, n - 1),
    ):
        r = s.get(url, headers={"Range": header})
        assert r.status_code == 206, header
        assert r.headers["content-range"] == f"bytes {first}-{last}/{n}"
        assert r.content == data[first : last + 1] and int(r.headers["content-length"]) == last - first + 1
    huge = "9" * 5000  # past Python's 4,300-digit int() limit (was a 500)
    for header in (f"bytes=0-{huge}", f"bytes=-{huge}", f"bytes=0000-{huge}"):  # to the end: the whole file
        r = s.get(url, headers={"Range": header})
        assert r.status_code == 206 and r.headers["content-range"] == f"bytes 0-{n - 1}/{n}" and r.content == data
    for header in (f"bytes={n}-", f"bytes={n + 10}-{n + 20}", "bytes=-0", f"bytes={huge}-", f"bytes={huge}-{huge}1"):
        r = s.get(url, headers={"Range": header})
        assert r.status_code == 416, (header, r.status_code, r.headers)
        assert_problem(r, 416, "range-not-satisfiable")
        assert r.headers["content-range"] == f"bytes */{n}"
    etag = s.get(url, headers={"Range": "bytes=0-0"}).headers["etag"]
    assert s.get(url, headers={"Range": "bytes=5-", "If-Range": etag}).content == data[5:]
    for header, extra in (
        ("bytes=0-1,5-6", {}),
        ("items=0-1", {}),
        ("bytes=9-3", {}),
        (f"bytes={huge}1-{huge}", {}),
        ("bytes=\u0661-\u0663".encode(), {}),  # Arabic-Indic digits: not ASCII, not a range
        ("bytes=5-", {"If-Range": '"' + "0" * 64 + '"'}),
    ):  # ignored: the whole file
        r = s.get(url, headers={"Range": header, **extra})
        assert r.status_code == 200 and r.content == data, header


@pytest.mark.parametrize(
    ("header", "size", "expected"),
    [
        ("bytes=0-0", 1, (0, 0)),
        ("bytes=3-", 3, Unsatisfiable),
        ("bytes=3-9", 3, Unsatisfiable),
        ("bytes=2-", 3, (2, 2)),
        ("bytes=-5", 3, (0, 2)),
        ("bytes=0-", 0, Unsatisfiable),
        ("bytes=-1", 0, Unsatisfiable),
        (" bytes=2-4 ", 10, (2, 4)),
        ("bytes=", 10, None),
        ("bytes=a-b", 10, None),
        (None, 10, None),
        ("bytes=0-" + "9" * 5000, 10, (0, 9)),
        ("bytes=-" + "9" * 5000, 10, (0, 9)),
        ("bytes=" + "9" * 5000 + "-", 10, Unsatisfiable),
        ("bytes=" + "0" * 5000 + "7-", 10, (7, 9)),
        ("bytes=2-" + "0" * 5000 + "5", 10, (2, 5)),
        ("bytes=" + "9" * 5000 + "-" + "9" * 4999, 10, None),
        ("bytes=\u0663-", 10, None),
        ("bytes=\uff13-", 10, None),
    ],
)
def test_byte_range(header, size, expected):
    if expected is Unsatisfiable:
        with pytest.raises(Unsatisfiable):
            byte_range(header, size)
    else:
        assert byte_range(header, size) == expected


def test_byte_range_fuzz():
    """Random Range shapes: whole file, 416, or a range inside the file; never another exception."""
    rng = random.Random(24)
    numbers = [
        "",
        "0",
        "1",
        "7",
        "10",
        "00",
        "0" * 40 + "3",
        "9" * 19,
        "9" * 5000,
        "1" + "0" * 4400,
        "-1",
        "+2",
        " 3",
        "1e3",
        "0x1f",
        "\u0663",
        "\u00b2",
    ]
    for _ in range(3000):
        header = rng.choice(["bytes=", "bytes =", "Bytes=", "items=", "bytes=,", ""]) + rng.choice(numbers)
        header += rng.choice(["-", "--", "", ",", "-,-"]) + rng.choice(numbers) + rng.choice(["", ",0-1", " ", "\t"])
        size = rng.choice([0, 1, 10, 2**40])
        try:
            span = byte_range(header, size)
        except Unsatisfiable:
            continue
        assert span is None or 0 <= span[0] <= span[1] < size, (header[:60], size, span)


def test_what_is_refused(job_output, tmp_path):
    s, job_id = job_output, job_output.job["id"]
    base = f"/v1/jobs/{job_id}/outputs/1/files"
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours\n")
    (s.folder(1) / "evil").symlink_to(secret)  # a symlink inside the folder pointing out
    (s.folder(1) / "tokenizer.json").unlink()
    (s.folder(1) / "tokenizer.json").symlink_to(secret)  # a listed name, now a symlink
    os.symlink(tmp_path, s.folder(1) / "outside")  # a symlinked folder
    paths = [
        "../../../../../../etc/passwd",
        "../k2/config.json",
        "%2e%2e/%2e%2e/%2e%2e/etc/passwd",
        "..%2fk2%2fconfig.json",
        "%2e%2e%2f.nbl-owner.json",
        "/etc/passwd",
        "//etc/passwd",
        "../.nbl-owner.json",
        ".nbl-files.json",
        "./config.json",
        "config.json/",
        "evil",
        "tokenizer.json",
        "outside/secret.txt",
        f"{secret}",
        "%00config.json",
    ]
    for path in paths:
        status, body = raw_get(s, f"{base}/{path}", s.auth)
        assert status == (422 if "%00" in path else 404), (path, status, body[:200])  # NUL: service/http/nul.py
        assert b"not yours" not in body and b"root:" not in body
    listed = {f["path"] for f in s.get(base).json()["data"]}
    assert not {"evil", "outside/secret.txt", ".nbl-owner.json", ".nbl-files.json"} & listed
    assert s.get(f"{base}/config.json").status_code == 200  # the folder itself still serves

    # another team: exactly an unknown job
    for path in (base, f"{base}/config.json"):
        r = s.get(path, headers=s.other)
        assert_problem(r, 404, "not-found")
        assert r.json()["detail"] == f"no job {job_id!r}"
    assert_problem(s.get(f"/v1/jobs/{job_id}/outputs/3/files"), 404, "not-found")  # no such k
    assert_problem(s.get(f"/v1/jobs/{job_id}/outputs/3/files/config.json"), 404, "not-found")

    # the output replaced by a later job of the team (overwrite): no longer this job's
    owner = s.settings.publish_dir / "alpha" / "out" / ".nbl-owner.json"
    owner.write_text(json.dumps({"team": "alpha", "job_id": "job_" + "f" * 32}))
    assert "no longer on the server" in assert_problem(s.get(base), 404, "not-found")["detail"]


def test_hub_old_rows_and_outputs_without_a_manifest(job_output):
    s = job_output
    other = hub_and_old_rows(s)
    job = s.get(f"/v1/jobs/{other}").json()
    assert {a["k"]: a["uri"] for a in job["artifacts"]} == {
        1: "https://huggingface.co/acme/x",
        2: f"/v1/jobs/{other}/outputs/2/files",
    }  # old row: mapped
    r = s.get(f"/v1/jobs/{other}/outputs/1/files")
    problem = assert_problem(r, 409, "output-on-hub")
    assert problem["hub_url"] == "https://huggingface.co/acme/x" and problem["commit_sha"] == "a" * 40
    assert r.headers["link"] == '<https://huggingface.co/acme/x>; rel="alternate"'
    assert "predates" in assert_problem(s.get(f"/v1/jobs/{other}/outputs/2/files"), 404, "not-found")["detail"]

    # published before manifests: hashed on the first listing, stored, then read back
    manifest = s.folder(2) / ".nbl-files.json"
    published = json.loads(manifest.read_text())
    manifest.unlink()
    first = s.get(f"/v1/jobs/{s.job['id']}/outputs/2/files").json()["data"]
    assert json.loads(manifest.read_text()) == published
    assert [(f["path"], f["size"], f["sha256"]) for f in first] == [
        (f["path"], f["size"], f["sha256"]) for f in published["files"]
    ]
    # the manifest, not the disk, is what is listed: a file changed afterwards keeps its published sum
    (s.folder(2) / "config.json").write_text("{}")
    again = {f["path"]: f["sha256"] for f in s.get(f"/v1/jobs/{s.job['id']}/outputs/2/files").json()["data"]}
    assert again["config.json"] == next(f["sha256"] for f in published["files"] if f["path"] == "config.json")


def test_a_fifo_is_never_opened_as_a_file(job_output):
    """A FIFO in place of a listed file, the manifest or the owner marker: a 404 or left out, at once.
    A plain open() of a FIFO waits for a writer: it pinned an API thread forever."""
    s, job_id = job_output, job_output.job["id"]
    base = f"/v1/jobs/{job_id}/outputs/1/files"
    fifos = []

    def fifo(path):
        path.unlink()
        os.mkfifo(path)
        fifos.append(path)

    try:
        fifo(s.folder(1) / "config.json")
        assert_problem(s.get(f"{base}/config.json", timeout=10), 404, "not-found")
        fifo(s.folder(1) / ".nbl-files.json")  # no manifest to read: the folder is hashed again
        listed = {f["path"] for f in s.get(base, timeout=10).json()["data"]}
        assert "model.safetensors" in listed and "config.json" not in listed
        fifo(s.settings.publish_dir / "alpha" / "out" / ".nbl-owner.json")
        assert "no longer" in assert_problem(s.get(base, timeout=10), 404, "not-found")["detail"]
    finally:  # a reader that a failing server left waiting gets its writer (and EOF)
        for path in fifos:
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
