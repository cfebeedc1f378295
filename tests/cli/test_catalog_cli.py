"""`nbl models` and `nbl usage` against a live API on SQLite, and the Python client's models()/usage()."""

from __future__ import annotations

import json

import pytest
from testkit.service_lib import TINY_CONFIG

from cli.main import main
from nbl_client import Client


@pytest.fixture
def served(served):
    """conftest.py's, with a tiny Llama's config.json as `local:tiny`."""
    d = served.models_dir / "tiny"
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps(TINY_CONFIG))
    return served


def run(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_models_and_usage(served, capsys):
    assert run(capsys, "submit", "--model", "acme/m", "--k", "1", "--json")[0] == 0
    code, out, err = run(capsys, "models")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("local:tiny") and "4 layers x 64, 4/2 heads" in lines[0] and "on disk" in lines[0]
    assert "0 recent job(s)" in lines[0]  # the team has not used it yet
    assert lines[1].startswith("acme/m") and "hub" in lines[1] and "1 recent job(s)" in lines[1]
    code, out, _ = run(capsys, "models", "--json", "--limit", "1")
    page = json.loads(out)
    assert code == 0 and [m["id"] for m in page["data"]] == ["local:tiny"] and page["has_more"]
    code, out, _ = run(capsys, "models", "--after", page["next_cursor"])
    assert code == 0 and out.startswith("acme/m")
    assert run(capsys, "models", "--after", "bogus")[0] == 4  # refused: the API's 422

    code, out, err = run(capsys, "usage")
    assert code == 0, err
    assert out.splitlines()[0] == "team ci: outputs 0 B on disk of 1.0 TB"  # the default quota
    assert "1 jobs (1 queued)  no worker time  GPU 0 h" in out
    code, out, _ = run(capsys, "usage", "--json")
    assert code == 0 and json.loads(out)["data"][0]["jobs"] == {"queued": 1, "total": 1}

    with Client() as client:  # the same through the Python client
        assert [m.id for m in client.models()] == ["local:tiny", "acme/m"]
        assert client.models().data[0].shape["layers"] == 4
        assert client.usage().data[0].jobs["total"] == 1 and client.usage().team == "ci"
