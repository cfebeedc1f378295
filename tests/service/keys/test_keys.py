"""`nbl admin create-key / list-keys / revoke-key / rotate-key` on SQLite and Postgres, checked
through the real API: a revoked key answers 401, a rotated one keeps working until revoked, team
names follow one grammar and a new team needs --create-team."""

from __future__ import annotations

import json
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import select, update

from cli.main import main
from service.api import create_app
from service.core.db import make_engine, make_sessionmaker
from service.core.models import ApiKey, Team, utcnow
from service.core.settings import Settings


@pytest.fixture
def admin(db_url, tmp_path, monkeypatch, capsys):
    """admin(*argv) -> (exit code, stdout, stderr) of `nbl admin ...` on this test's database."""
    monkeypatch.setenv("NBL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DATABASE_URL", db_url)

    def run(*argv: str) -> tuple[int, str, str]:
        capsys.readouterr()
        rc = main(["admin", *argv])
        out = capsys.readouterr()
        return rc, out.out, out.err

    return run


def new_key(admin, team: str, *flags: str) -> tuple[int, str]:
    rc, out, err = admin("create-key", "--team", team, *flags)
    assert rc == 0, err
    key = out.strip().splitlines()[-1]
    return int(out.split("key ")[1].split()[0]), key


def list_keys(admin, *flags: str) -> list[dict]:
    rc, out, err = admin("list-keys", "--json", *flags)
    assert rc == 0, err
    return json.loads(out)


@pytest.mark.parametrize(
    "name", ["", "Alpha", "-alpha", "al_pha", "al pha", "alpha\nbeta", "a" * 64, "x" * 5000, "../alpha", "alpha\x00"]
)
def test_create_key_refuses_a_bad_team_name(admin, db_url, name):
    rc, out, err = admin("create-key", f"--team={name}", "--create-team")
    assert rc == 2 and out == ""
    assert err.startswith("nbl: error: invalid team name") and err.count("\n") == 1 and len(err) < 300
    engine = make_engine(Settings())
    with make_sessionmaker(engine)() as s:
        assert s.scalars(select(Team)).all() == []
    engine.dispose()


def test_a_new_team_needs_create_team(admin):
    rc, out, err = admin("create-key", "--team", "alpha")
    assert rc == 2 and out == "" and err == "nbl: error: no team 'alpha'; give --create-team to create it\n"
    _, key = new_key(admin, "alpha", "--create-team")
    assert key.startswith("nbl_")
    rc, out, err = admin("create-key", "--team", "alhpa")  # a typo: refused, with the close name
    assert rc == 2 and "no team 'alhpa' (did you mean alpha?)" in err
    new_key(admin, "alpha")  # an existing team needs no flag
    new_key(admin, "alpha", "--create-team")  # nor does the flag hurt (scripts run twice)
    assert [k["team"] for k in list_keys(admin)] == ["alpha"] * 3
    rc, _, err = admin("create-key", "--team", "alpha", "--name", "x" * 65)
    assert rc == 2 and "at most 64" in err


def test_revoke_and_rotate_through_the_api(admin, live_server):
    old_id, old = new_key(admin, "alpha", "--create-team", "--name", "ci")
    url = live_server(create_app(Settings()))

    def status(key: str) -> int:
        return httpx.get(f"{url}/v1/jobs", headers={"Authorization": f"Bearer {key}"}).status_code

    assert status(old) == 200
    rc, out, err = admin("rotate-key", "--team", "alpha")
    assert rc == 0, err
    new = out.strip().splitlines()[-1]
    assert new.startswith("nbl_") and new != old and f"{old_id} ({old[:12]}...)" in out
    assert status(new) == 200 and status(old) == 200  # the old key works until revoked

    rc, out, _ = admin("revoke-key", str(old_id))
    assert rc == 0 and "revoked" in out
    assert status(old) == 401 and status(new) == 200
    rc, out, _ = admin("revoke-key", str(old_id))  # twice: harmless
    assert rc == 0 and "already revoked" in out
    rc, _, err = admin("revoke-key", "999")
    assert rc == 2 and "no key with id 999" in err
    rc, _, err = admin("rotate-key", "--team", "beta")  # rotation never creates a team
    assert rc == 2 and "no team 'beta'" in err

    keys = list_keys(admin, "--team", "alpha")
    assert [set(k) for k in keys] == [{"id", "prefix", "team", "created_at", "last_used_at", "revoked_at"}] * 2
    assert [k["id"] for k in keys] == [old_id, old_id + 1]
    assert keys[0]["revoked_at"] and keys[1]["revoked_at"] is None
    assert all(k["last_used_at"] for k in keys) and keys[0]["prefix"] == old[:12]
    rc, out, _ = admin("list-keys")
    assert rc == 0 and old[:12] in out and "ci" in out
    for text in (out, json.dumps(keys)):  # never the key, nor its hash
        assert old not in text and new not in text and old[12:20] not in text
    rc, _, err = admin("list-keys", "--team", "nobody")
    assert rc == 2 and "no team 'nobody'" in err


def test_last_used_is_written_at_most_once_a_minute(admin, live_server):
    key_id, key = new_key(admin, "alpha", "--create-team")
    assert list_keys(admin)[0]["last_used_at"] is None
    url = live_server(create_app(Settings()))
    engine = make_engine(Settings())
    sessions = make_sessionmaker(engine)

    def last_used():
        with sessions() as s:
            return s.get(ApiKey, key_id).last_used_at

    def get() -> None:
        assert httpx.get(f"{url}/v1/jobs", headers={"Authorization": f"Bearer {key}"}).status_code == 200

    get()
    first = last_used()
    assert first is not None
    get()
    assert last_used() == first  # within the minute: no write
    stale = utcnow() - timedelta(minutes=2)
    with sessions() as s:
        s.execute(update(ApiKey).where(ApiKey.id == key_id).values(last_used_at=stale))
        s.commit()
    get()
    assert last_used() > stale + timedelta(seconds=60)
    engine.dispose()


@pytest.mark.parametrize("key_id", ["99999999999999999999999", str(2**31), str(2**63), "-1", "0"])
def test_revoke_key_of_an_id_no_key_can_have_is_one_line(admin, key_id):
    """Past the id column's range, Postgres raised NumericValueOutOfRange: a SQLAlchemy traceback, exit 1."""
    rc, out, err = admin("revoke-key", "--", key_id)
    assert rc == 2 and out == "" and err.startswith(f"nbl: error: no key with id {key_id} ") and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["admin", "dispatch", "--stale-after", "1e300"],
        ["admin", "dispatch", "--stale-after", "inf"],
        ["admin", "dispatch", "--stale-after", "nan"],
        ["admin", "dispatch", "--stale-after=-1"],
        ["reconcile", "--interval", "inf"],
        ["reconcile", "--interval", "1e300"],
        ["reconcile", "--interval", "nan"],
        ["reconcile", "--once", "--interval", "0"],
    ],
)
def test_the_admin_commands_numbers_are_bounded(admin, capsys, argv):
    """An overflowing --stale-after was a traceback (OverflowError), --interval inf one at the first wait and
    nan a loop that never slept: now one line and exit 2, before any database or broker is reached."""
    capsys.readouterr()
    assert main(argv) == 2
    out = capsys.readouterr()
    flag = argv[2].split("=")[0] if argv[0] == "admin" else "--interval"
    assert out.out == "" and out.err.startswith(f"nbl: error: {flag} must be ") and out.err.count("\n") == 1, out.err
