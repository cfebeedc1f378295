"""`nbl jobs`, `nbl cancel`, `nbl logs`, `nbl submit -|--wait|--webhook-url|--max-tokens` against a
live API on SQLite; `nbl wait`'s printing (a line per change, a heartbeat) and number format."""

from __future__ import annotations

import io
import json
import threading
from types import SimpleNamespace

import pytest

from cli.client.format import metric_order, metrics_table, readable
from cli.client.wait import WaitPrinter
from cli.main import main
from nbl_client import Event, EventList, Job
from service.jobs import lease, states, store


def run(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_jobs_cancel_logs(served, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO('{"model": {"id": "acme/m"}, "compression": {"k": 4}}'))
    code, out, err = run(
        capsys, "submit", "-", "--metadata", "ci=7", "--metadata", "branch=main", "--max-tokens", "64", "--json"
    )
    assert code == 0, err
    a = json.loads(out)
    assert a["metadata"] == {"ci": "7", "branch": "main"} and a["spec"]["evaluation"]["max_tokens"] == 64
    code, out, _ = run(capsys, "submit", "--model", "acme/m", "--k", "2", "--metadata", "ci=8", "--json")
    b = json.loads(out)

    code, out, _ = run(capsys, "jobs", "--metadata", "ci=7")
    assert code == 0 and out.splitlines()[0].startswith(a["id"]) and len(out.splitlines()) == 1
    assert "ci=7" in out and "acme/m" in out
    code, out, _ = run(capsys, "jobs", "--json", "--limit", "1")
    page = json.loads(out)
    assert [j["id"] for j in page["data"]] == [b["id"]] and page["has_more"]
    assert run(capsys, "jobs", "--metadata", "ci")[0] == 2  # not KEY=VALUE: a usage error

    code, out, _ = run(capsys, "cancel", a["id"])
    assert code == 0 and out.strip() == f"{a['id']}  cancelled"
    code, _, err = run(capsys, "cancel", a["id"])
    assert code == 4 and "409" in err  # already ended: refused
    code, _, err = run(capsys, "cancel", "job_" + "0" * 32)
    assert code == 4 and "404" in err

    code, out, _ = run(capsys, "logs", a["id"])
    assert code == 0 and out.strip().splitlines()[-1].endswith("status: cancelled")
    code, out, _ = run(capsys, "logs", a["id"], "--follow", "--json")  # the job has ended: follow stops
    assert code == 0 and json.loads(out.splitlines()[-1])["message"] == "cancelled"


def test_submit_wait_exits_by_the_job(served, capsys):
    code, _, err = run(
        capsys, "submit", "--model", "acme/m", "--k", "4", "--wait", "--timeout", "0.5", "--interval", "0.1"
    )
    assert code == 3 and "timed out after 0.5 s" in err and "queued" in err
    job_id = err.split("submitted ")[1].split()[0]
    assert run(capsys, "cancel", job_id)[0] == 0
    code, out, _ = run(capsys, "wait", job_id, "--quiet")
    assert code == 2 and out.startswith(f"{job_id}  cancelled")


def test_wait_prints_a_line_per_stage_warnings_and_a_rare_heartbeat():
    """The default (issue 38: a 5-minute job printed about 90 lines): one line per stage, not per percent."""
    now = [0.0]
    out = io.StringIO()
    printer = WaitPrinter(out=out, clock=lambda: now[0])

    def poll(t, status, stage, progress, *events):
        now[0] = t
        job = Job(id="job_x", status=status, stage=stage, progress=progress)
        printer(job, EventList(data=[Event(id=i, kind=k, stage=stage, message=m) for i, (k, m) in enumerate(events)]))

    poll(0, "queued", None, 0.0)
    poll(1, "running", "calibrate", 0.0, ("stage", None), ("status", "running"))
    for t in range(2, 100):
        poll(t, "running", "calibrate", t / 400)  # the progress moves at every poll: silent
    poll(100, "running", "score", 0.3, ("stage", None), ("warning", "too few tokens"))
    poll(401, "running", "score", 0.35)  # 300 s since the last line: the heartbeat
    poll(402, "succeeded", None, 1.0, ("status", "succeeded"))
    lines = out.getvalue().splitlines()
    assert len(lines) == 6, lines
    assert lines[0].startswith("queued") and lines[1].startswith("running    calibrate")
    assert "too few tokens" in lines[2] and lines[3].startswith("running    score")
    assert "still; no change for 301 s" in lines[4] and lines[5].startswith("succeeded")


def test_wait_verbose_prints_every_change_and_a_heartbeat():
    now = [0.0]
    out = io.StringIO()
    printer = WaitPrinter(out=out, clock=lambda: now[0], heartbeat_s=60, verbose=True)

    def poll(t, status, stage, progress, *events):
        now[0] = t
        job = Job(id="job_x", status=status, stage=stage, progress=progress)
        printer(job, EventList(data=[Event(id=i, kind=k, stage=stage, message=m) for i, (k, m) in enumerate(events)]))

    poll(0, "queued", None, 0.0)
    poll(1, "queued", None, 0.0)  # nothing new: silent
    poll(2, "running", "score", 0.0, ("stage", None))
    for t in range(3, 62):
        poll(t, "running", "score", 0.0)  # 59 polls at 0.0 %: silent until the heartbeat
    poll(62, "running", "score", 0.0)  # 60 s since the last line: the heartbeat
    poll(63, "running", "score", 0.0004)  # below the shown 0.1 %: silent
    poll(64, "running", "score", 0.25)
    lines = out.getvalue().splitlines()
    assert len(lines) == 5, lines
    assert lines[0].startswith("queued") and "stage: score" in lines[1] and lines[2].startswith("running    score")
    assert "still; no change for 60 s" in lines[3] and "25.0%" in lines[4]


def test_readable_numbers_and_a_stable_metric_order():
    assert [readable(x) for x in (1.062e8, 23.4567, 20.25, 0.52341, 1e-5, 250.04, 12, None)] == [
        "106,200,000",
        "23.457",
        "20.25",
        "0.5234",
        "1.00e-05",
        "250",
        "12",
        "-",
    ]
    names = [
        "speed/decode_tokens_per_s",
        "tasks/arc_easy/acc_norm",
        "perplexity/wikitext2/tokens",
        "tasks/arc_easy/acc",
        "perplexity/c4/ppl",
        "perplexity/wikitext2/ppl",
        "other",
        "perplexity/wikitext2/bits_per_byte",
    ]
    assert sorted(names, key=metric_order) == [
        "perplexity/c4/ppl",
        "perplexity/wikitext2/ppl",
        "perplexity/wikitext2/bits_per_byte",
        "perplexity/wikitext2/tokens",
        "tasks/arc_easy/acc",
        "tasks/arc_easy/acc_norm",
        "speed/decode_tokens_per_s",
        "other",
    ]
    table = metrics_table(
        {"k12": {"perplexity/c4/ppl": 1.062e8}, "base": {"perplexity/c4/ppl": 30.5}, "k4": {"perplexity/c4/ppl": 40.0}}
    )
    assert table[0].split() == ["metric", "base", "k4", "k12"] and table[1].split()[1:] == ["30.5", "40", "106,200,000"]


def test_submit_flags_reach_the_body():
    from cli.client.job_request import build_request

    flags = {
        k: None
        for k in (
            "file",
            "model",
            "revision",
            "dataset",
            "dataset_config",
            "split",
            "text_field",
            "num_samples",
            "seq_len",
            "seed",
            "shuffle",
            "mode",
            "method",
            "criterion",
            "k",
            "perplexity",
            "tasks",
            "limit",
            "speed",
            "publish_repo",
            "public",
            "publish_revision",
            "create_pr",
            "local_dir",
        )
    }
    args = SimpleNamespace(
        **flags
        | {
            "model": "acme/m",
            "max_tokens": 128,
            "webhook_url": "https://ci.example.com/h",
            "metadata": ["a=1"],
            "task_file": [],
        }
    )
    assert build_request(args) == {
        "model": {"id": "acme/m"},
        "evaluation": {"max_tokens": 128},
        "webhook_url": "https://ci.example.com/h",
        "metadata": {"a": "1"},
    }


def test_help_documents_every_exit_code(capsys):
    for command in ("submit", "wait", "jobs", "cancel", "logs"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = capsys.readouterr().out
        assert all(f"\n  {code}  " in text for code in range(6)), command


def test_logs_follow_prints_every_event_until_the_job_ends(served, capsys):
    from service.core.db import make_engine, make_sessionmaker

    code, out, _ = run(capsys, "submit", "--model", "acme/m", "--k", "4", "--json")
    job_id = json.loads(out)["id"]
    engine = make_engine(served)

    def worker():  # whenever it runs, --follow must print all of it and stop at the end
        with make_sessionmaker(engine)() as s:
            token = lease.claim_job(s, job_id, 60)
            store.set_progress(s, job_id, "score", 0.5, lease_token=token)
            store.add_event(s, job_id, "warning", "a warning of the job")
            states.finish(s, job_id, token, "succeeded")

    t = threading.Thread(target=worker)
    t.start()
    code, out, _ = run(capsys, "logs", job_id, "--follow", "--interval", "0.05")
    t.join()
    engine.dispose()
    assert code == 0
    assert "stage: score" in out and "warning: a warning of the job" in out
    assert out.strip().splitlines()[-1].endswith("status: succeeded")


def test_cancel_of_a_job_that_began_publishing_says_so_and_exits_4(served, capsys):
    from service.core.db import make_engine, make_sessionmaker

    code, out, _ = run(capsys, "submit", "--model", "acme/m", "--k", "4", "--json")
    job_id = json.loads(out)["id"]
    engine = make_engine(served)
    with make_sessionmaker(engine)() as s:  # a worker reached its publish stage
        assert states.begin_publish(s, job_id, lease.claim_job(s, job_id, 60))
    engine.dispose()
    code, out, err = run(capsys, "cancel", job_id)
    assert (code, out) == (4, "")
    assert err.startswith("nbl: The job is publishing; cancel not possible (409): ")
    assert f"job {job_id} is publishing; cancel not possible: it will end succeeded or failed" in err


def test_submit_quantize_asks_publish_quantize_and_needs_a_destination(served, capsys):
    """`nbl submit --quantize w8a8,w4a16`: publish.quantize in the stored request; without a destination, one line
    saying what to add (exit 2); an unknown scheme names the known ones; a form that cannot be quantized, the API's
    422 saying why."""
    argv = ["submit", "--model", "acme/m", "--k", "2", "--mode", "block", "--form", "fold", "--json"]
    code, out, _ = run(capsys, *argv, "--local-dir", "q", "--quantize", "w8a8,w4a16")
    assert code == 0, out
    assert json.loads(out)["spec"]["publish"]["quantize"] == ["w8a8", "w4a16"]
    code, _, err = run(capsys, *argv, "--quantize", "w8a8")
    assert code == 2 and "give --local-dir or --publish-repo" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit):
        main([*argv, "--local-dir", "q", "--quantize", "int3"])
    assert "schemes are fp8-dynamic, w8a8, w4a16" in capsys.readouterr().err
    code, out, err = run(capsys, "submit", "--model", "acme/m", "--k", "2", "--local-dir", "q", "--quantize", "w8a8")
    assert code != 0 and "publish.quantize" in out + err and "plugin" in out + err
