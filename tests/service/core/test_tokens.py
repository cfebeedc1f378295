"""Hub tokens: encrypted at rest (Fernet), write-only in the API, read by the worker from the DB after
claiming, a job's own token deleted when the job ends. On SQLite and Postgres."""

from __future__ import annotations

import io
import stat

import pytest
from sqlalchemy import select, text

from service.core import secrets
from service.core.models import Job, Team
from service.core.settings import Settings
from service.jobs import lease, states, store

TOKEN = "hf_canary_job_token_7f3a9c"
HUB = {"repo_id": "alpha/tiny-nbl"}


def body(**publish) -> dict:
    return {"model": {"id": "a/b"}, "compression": {"k": 2}, "publish": {**HUB, **publish}}


def test_key_file_is_created_once_with_mode_0600(tmp_path):
    s = Settings(home=tmp_path / "home")
    c = secrets.encrypt(s, TOKEN)
    key = s.home / secrets.KEY_FILE
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert TOKEN not in c and secrets.decrypt(Settings(home=tmp_path / "home"), c) == TOKEN  # the same key
    with pytest.raises(secrets.SecretError, match="cannot be decrypted"):
        secrets.decrypt(Settings(home=tmp_path / "other"), c)  # another home, another key


def test_secret_key_setting_and_rotation(tmp_path):
    old, new = secrets.generate_key(), secrets.generate_key()
    c = secrets.encrypt(Settings(home=tmp_path, secret_key=old), TOKEN)
    assert not (tmp_path / secrets.KEY_FILE).exists()  # NBL_SECRET_KEY set: no key file
    rotated = Settings(home=tmp_path, secret_key=f"{new},{old}")
    assert secrets.decrypt(rotated, c) == TOKEN  # the old key still decrypts
    assert secrets.decrypt(Settings(home=tmp_path, secret_key=new), secrets.encrypt(rotated, TOKEN)) == TOKEN
    assert TOKEN not in repr(rotated) and old not in repr(rotated)
    with pytest.raises(ValueError, match="Fernet keys"):
        secrets.encrypt(Settings(home=tmp_path, secret_key="not-a-key"), TOKEN)


def test_a_job_token_is_write_only_and_encrypted(client, auth, sessions, settings):
    resp = client.post("/v1/jobs", json=body(token=TOKEN), headers={**auth, "Idempotency-Key": "k1"})
    assert resp.status_code == 201, resp.text
    job_id = resp.json()["id"]
    assert TOKEN not in resp.text and "token" not in resp.json()["spec"]["publish"]
    for url in (f"/v1/jobs/{job_id}", "/v1/jobs", f"/v1/jobs/{job_id}/events"):
        assert TOKEN not in client.get(url, headers=auth).text
    with sessions() as s:
        job = s.get(Job, job_id)
        assert "token" not in job.spec["publish"] and TOKEN not in str(job.spec)
        assert job.hub_token_encrypted and TOKEN not in job.hub_token_encrypted
        assert secrets.decrypt(settings, store.hub_token_ciphertext(s, job_id)) == TOKEN
        # the request hash leaves the token out: the same request without it hashes the same
        from nbl.request import JobCreate
        from service.jobs.submit import request_hash

        assert job.request_hash == request_hash(JobCreate.model_validate(body()))
    # a replay with another token is the same job, untouched (the token is not part of the request's identity)
    again = client.post("/v1/jobs", json=body(token="hf_other"), headers={**auth, "Idempotency-Key": "k1"})
    assert again.json()["id"] == job_id and again.headers["Idempotent-Replayed"] == "true"
    schema = client.get("/openapi.json").json()["components"]["schemas"]["HubPublish"]["properties"]["token"]
    assert "writeOnly" in str(schema)


def test_the_token_is_deleted_when_the_job_ends(client, auth, sessions):
    ids = [client.post("/v1/jobs", json=body(token=TOKEN), headers=auth).json()["id"] for _ in range(3)]
    with sessions() as s:
        token = lease.claim_job(s, ids[0], 60)
        assert states.finish(s, ids[0], token, "failed", error_type="user", error_message="x")
        token = lease.claim_job(s, ids[1], 60)
        assert states.finish(s, ids[1], token, "succeeded")
    assert client.post(f"/v1/jobs/{ids[2]}/cancel", headers=auth).status_code == 200  # queued -> cancelled
    with sessions() as s:
        assert [s.scalar(select(Job.hub_token_encrypted).where(Job.id == i)) for i in ids] == [None, None, None]


def test_the_job_token_wins_over_the_team_token(client, auth, sessions, settings):
    from service.keys.auth import set_team_hub_token

    team_tok = "hf_canary_team_token_55e1"
    with sessions() as s:
        set_team_hub_token(s, "alpha", secrets.encrypt(settings, team_tok))
    own = client.post("/v1/jobs", json=body(token=TOKEN), headers=auth).json()["id"]
    team = client.post("/v1/jobs", json=body(), headers=auth).json()["id"]
    with sessions() as s:
        assert secrets.decrypt(settings, store.hub_token_ciphertext(s, own)) == TOKEN
        assert secrets.decrypt(settings, store.hub_token_ciphertext(s, team)) == team_tok
        set_team_hub_token(s, "alpha", None)
        assert store.hub_token_ciphertext(s, team) is None
        with pytest.raises(ValueError, match="no team"):
            set_team_hub_token(s, "nobody", None)


def test_set_hub_token_reads_stdin_never_argv(settings, sessions, monkeypatch, capsys, team_key):
    from cli.main import main

    team_key("alpha")
    monkeypatch.setenv("NBL_HOME", str(settings.home))
    monkeypatch.setenv("DATABASE_URL", settings.database_url)
    monkeypatch.delenv("NBL_HUB_TOKEN", raising=False)
    monkeypatch.setattr("sys.stdin", io.StringIO(TOKEN + "\n"))
    assert main(["admin", "set-hub-token", "--team", "alpha"]) == 0
    out = capsys.readouterr()
    assert TOKEN not in out.out + out.err and "stored (encrypted)" in out.out
    with sessions() as s:
        stored = s.scalar(select(Team.hub_token_encrypted).where(Team.name == "alpha"))
        assert TOKEN not in stored and secrets.decrypt(settings, stored) == TOKEN
        # no plaintext anywhere in the teams table
        assert TOKEN not in str(s.execute(text("SELECT * FROM teams")).all())
    monkeypatch.setenv("NBL_HUB_TOKEN", "hf_from_env")
    assert main(["admin", "set-hub-token", "--team", "alpha"]) == 0
    with sessions() as s:
        assert (
            secrets.decrypt(settings, s.scalar(select(Team.hub_token_encrypted).where(Team.name == "alpha")))
            == "hf_from_env"
        )
    assert main(["admin", "set-hub-token", "--team", "alpha", "--clear"]) == 0
    with sessions() as s:
        assert s.scalar(select(Team.hub_token_encrypted).where(Team.name == "alpha")) is None


@pytest.mark.parametrize("token", ["hf_\udcff", "hf_a\x01b", "hf_a b"])  # \udcff: the byte ff, as os.environ reads it
def test_set_hub_token_refuses_what_a_job_token_may_not_be(settings, sessions, monkeypatch, capsys, team_key, token):
    """A non-UTF-8 byte in $NBL_HUB_TOKEN was a traceback at encrypt; now one line and exit 2, nothing stored."""
    from cli.main import main

    team_key("alpha")
    monkeypatch.setenv("NBL_HOME", str(settings.home))
    monkeypatch.setenv("DATABASE_URL", settings.database_url)
    monkeypatch.setenv("NBL_HUB_TOKEN", token)
    assert main(["admin", "set-hub-token", "--team", "alpha"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nbl: error: a Hub token is visible ASCII only") and err.count("\n") == 1, err
    with sessions() as s:
        assert s.scalar(select(Team.hub_token_encrypted).where(Team.name == "alpha")) is None
