"""nbl_client.Client against the real API (a live uvicorn, SQLite and Postgres): submit (with an
idempotent retry), read, list with metadata filters, events, cancel, wait; typed answers."""

from __future__ import annotations

import threading

import pytest
from testkit.service_lib import body

from nbl_client import ApiError, Client, Event, Job, MissingKey, WaitTimeout
from service.api import create_app
from service.jobs import lease, states, store


@pytest.fixture
def api(settings, live_server, team_key):
    url = live_server(create_app(settings))
    with Client(url, team_key("alpha")["Authorization"].split()[1], connect_timeout=5) as c:
        yield c


def test_submit_list_filter_cancel_events(api):
    a = api.submit(body(metadata={"ci": "7", "branch": "main"}, evaluation={"max_tokens": 64}), idempotency_key="ci-7")
    assert isinstance(a, Job) and a.status == "queued" and a.metadata == {"ci": "7", "branch": "main"}
    assert a.spec["evaluation"]["max_tokens"] == 64 and a.created_at is not None
    assert (
        api.submit(
            body(metadata={"ci": "7", "branch": "main"}, evaluation={"max_tokens": 64}), idempotency_key="ci-7"
        ).id
        == a.id
    )
    b = api.submit(body(metadata={"ci": "7", "branch": "dev"}))
    api.submit(body(metadata={"ci": "8"}))

    assert [j.id for j in api.jobs(metadata={"ci": "7"}).data] == [b.id, a.id]
    assert [j.id for j in api.jobs(metadata={"ci": "7", "branch": "main"}).data] == [a.id]
    page = api.jobs(metadata={"ci": "7"}, limit=1)
    assert page.has_more
    assert [j.id for j in api.jobs(metadata={"ci": "7"}, limit=1, after=page.next_cursor).data] == [a.id]
    assert api.jobs(status=["failed", "cancelled"]).data == []

    cancelled = api.cancel(a.id)
    assert cancelled.status == "cancelled" and api.job(a.id).done
    assert [j.id for j in api.jobs(status="cancelled").data] == [a.id]
    events = api.events(a.id)
    assert events.data and all(isinstance(e, Event) for e in events.data)
    assert events.data[-1].kind == "status" and events.data[-1].message == "cancelled"
    assert api.events(a.id, after=events.last_id).data == []

    with pytest.raises(ApiError) as refused:
        api.cancel(a.id)
    assert refused.value.status == 409
    with pytest.raises(ApiError) as unknown:
        api.job("job_" + "0" * 32)
    assert unknown.value.status == 404


def test_wait_follows_a_job_to_its_end(api, sessions):
    job = api.submit(body(k=[2, 4]))
    with pytest.raises(WaitTimeout) as timed_out:
        api.wait(job.id, timeout=0.3, interval=0.05)
    assert timed_out.value.job.status == "queued"

    polls: list[tuple[str, list[str]]] = []
    started = threading.Event()

    def on_poll(j, events):
        polls.append((j.status, [e.kind for e in events.data]))
        started.set()

    def worker():  # as the worker would, once wait is polling
        started.wait(10)
        with sessions() as s:
            token = lease.claim_job(s, job.id, 60)
            store.set_progress(s, job.id, "evaluate", 0.5, lease_token=token)
            store.save_metrics(s, job.id, "base", {"perplexity/wikitext2/ppl": 20.25}, lease_token=token)
            states.finish(s, job.id, token, "succeeded")

    t = threading.Thread(target=worker)
    t.start()
    done = api.wait(job.id, interval=0.05, max_interval=0.1, on_poll=on_poll)
    t.join()
    assert done.status == "succeeded" and done.metrics == {"base": {"perplexity/wikitext2/ppl": 20.25}}
    assert polls[-1][0] == "succeeded"
    kinds = [k for _, ks in polls for k in ks]
    assert "stage" in kinds and kinds.count("status") >= 2  # each event handed over once, in order


def test_list_objects_are_sequences_of_their_items(api, sessions, settings, tmp_path):
    """The README's `nbl.files(job_id, k)` used as a list: iterating it gave pydantic's (field, value)
    pairs, so `f.path` failed; `.data` still works."""
    from worker.publish.local import LocalDir

    job = api.submit(body(k=1, metadata={"ci": "seq"}))
    staged = tmp_path / "staged"
    (staged / "sub").mkdir(parents=True)
    (staged / "config.json").write_text("{}\n")
    (staged / "sub" / "w.bin").write_bytes(b"w" * 10)
    with sessions() as s:
        token = lease.claim_job(s, job.id, 60)
        published = LocalDir(settings.publish_dir, "alpha", "out", job.id).publish(staged, 1, several=False)
        assert store.save_artifact(s, job.id, 1, published.kind, published.uri, lease_token=token)
        states.finish(s, job.id, token, "succeeded")

    files = api.files(job.id, 1)
    assert sorted(f.path for f in files) == ["config.json", "sub/w.bin"] == sorted(f.path for f in files.data)
    assert len(files) == 2 and files[0] == files.data[0] and files[-1].size in (3, 10) and files[0] in files
    assert [f.path for f in api.download(job.id, None, tmp_path / "dl")] == [f.path for f in files]
    jobs = api.jobs(metadata={"ci": "seq"})
    assert [j.id for j in jobs] == [job.id] and len(jobs) == 1 and jobs[0].status == "succeeded"
    events = api.events(job.id)
    assert [e.kind for e in events] == [e.kind for e in events.data] and events[-1].message == "succeeded"
    assert list(api.jobs(status="failed")) == [] and len(api.jobs(status="failed")) == 0


def test_a_client_needs_a_key_and_a_url(monkeypatch):
    monkeypatch.delenv("NBL_API_KEY", raising=False)
    with pytest.raises(MissingKey):
        Client("http://127.0.0.1:9")
    with pytest.raises(ValueError, match="must start with http"):
        Client("127.0.0.1:8000", "nbl_x")


def test_cancel_of_a_job_that_began_publishing_is_a_409_of_its_own_type(api, sessions):
    job = api.submit(body())
    with sessions() as s:
        assert states.begin_publish(s, job.id, lease.claim_job(s, job.id, 60))
    with pytest.raises(ApiError) as refused:
        api.cancel(job.id)
    assert refused.value.status == 409 and refused.value.problem["type"].endswith("/job-publishing")
    assert "cancel not possible" in str(refused.value) and api.job(job.id).status == "running"


def test_estimate_sizes_a_request_before_it_is_submitted(api, settings):
    """docs/api.md's example sizes its job first: the defaults cost hours on a CPU worker (issue 38 §3)."""
    import json

    from testkit.service_lib import TINY_CONFIG

    (settings.models_dir / "m").mkdir(parents=True)
    (settings.models_dir / "m" / "config.json").write_text(json.dumps({**TINY_CONFIG, "max_position_embeddings": 4096}))
    small = api.estimate(
        body(model="local:m", k=1, calibration={"num_samples": 8, "seq_len": 32}, evaluation={"max_tokens": 64})
    )
    default = api.estimate(body(model="local:m", k=1))
    assert small["seconds"][0] > 0 and small["seconds"][1] < default["seconds"][1]
    with pytest.raises(ApiError) as refused:
        api.estimate(body(model="local:m", k=[7]))  # k at or above the model's layers
    assert refused.value.status == 422
    assert api.jobs().data == []  # an estimate makes no job
