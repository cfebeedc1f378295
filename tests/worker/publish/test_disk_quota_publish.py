"""The team's disk quota at publish (issue 24 §15): the publish stage checks the job's outputs against the quota
before publishing begins, LocalDir checks each output under its lock before copying it, and a refusal
(QuotaExceeded, a `user` failure) leaves nothing of the job in the team's folder. Real tiny outputs, real folders."""

from __future__ import annotations

import shutil

import pytest
from publish_helpers import compress_tiny, write_text_file

from nbl.lru import tree_size
from nbl.outputs.quota import QuotaExceeded, usage
from worker.errors import classify
from worker.pipeline import publish
from worker.publish.local import LocalDir


class Sink:
    def __init__(self):
        self.calls = []

    def progress(self, stage, fraction, message): ...

    def begin_publish(self):
        self.calls.append("begin")

    def output(self, k, layers, published):
        self.calls.append(f"k{k}")


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("quota")
    result, _ = compress_tiny(tmp, write_text_file(tmp / "calib.jsonl"), ks=(1, 2))
    return {o["k"]: (tmp / "out" / f"k{o['k']}", o["replaced_layers"]) for o in result.outputs}


@pytest.fixture
def staged(made, tmp_path):
    """The outputs copied for this test (publish rewrites their cards), and what each k replaces."""
    outputs = {k: shutil.copytree(path, tmp_path / "staged" / f"k{k}") for k, (path, _) in made.items()}
    return outputs, {k: layers for k, (_, layers) in made.items()}


def run(staged, tmp_path, quota, name="out", job_id="job_0001"):
    outputs, selected = staged
    sink = Sink()
    publish(
        outputs,
        selected,
        LocalDir(tmp_path / "published", "alpha", name, job_id, quota=quota),
        {},
        {"model": {"id": "local:tiny"}},
        sink,
    )
    return sink


def test_outputs_over_the_quota_fail_before_publishing_begins_and_leave_nothing(staged, tmp_path):
    (tmp_path / "published" / "alpha" / "kept").mkdir(parents=True)
    (tmp_path / "published" / "alpha" / "kept" / "weights.bin").write_bytes(b"x" * 1000)
    quota = sum(tree_size(p) for p in staged[0].values())  # too few once the cards are written, with the kept output
    sink = Sink()
    with pytest.raises(QuotaExceeded) as refused:
        publish(
            *staged,
            LocalDir(tmp_path / "published", "alpha", "out", "job_0001", quota=quota),
            {},
            {"model": {"id": "local:tiny"}},
            sink,
        )
    assert sink.calls == []  # not begun: the job fails, it is not un-cancellable for nothing
    assert classify(refused.value).type == "user"
    total = sum(tree_size(p) for p in staged[0].values())  # as checked: with the cards the stage wrote first
    assert str(refused.value).startswith(f"publishing 'out': {total} bytes (1.")
    assert f"over its disk quota of {quota} bytes" in str(refused.value)
    assert "its outputs use 1000 bytes (1.0 kB) now" in str(refused.value)
    assert sorted(p.name for p in (tmp_path / "published" / "alpha").iterdir()) == ["kept"]
    assert not any((tmp_path / "published" / ".nbl-staging").iterdir())


def test_outputs_within_the_quota_are_published(staged, tmp_path):
    total = sum(tree_size(p) for p in staged[0].values())
    assert run(staged, tmp_path, quota=total + 200_000).calls == [
        "begin",
        "k1",
        "k2",
    ]  # the cards written at publish, the bookkeeping files
    assert sorted(p.name for p in (tmp_path / "published" / "alpha" / "out").iterdir()) == [
        ".nbl-owner.json",
        "README.md",
        "k1",
        "k2",
    ]


def test_a_retried_publish_counts_the_output_it_replaces_as_freed(staged, tmp_path):
    total = sum(tree_size(p) for p in staged[0].values())
    assert run(staged, tmp_path, quota=total + 200_000).calls == ["begin", "k1", "k2"]
    held = usage(tmp_path / "published", "alpha")  # the job's output: cards and bookkeeping files included
    try:  # the same job again, the team's quota now all taken by its first copy: replaced, not added
        again = run(staged, tmp_path, quota=held)
    except QuotaExceeded as e:
        pytest.fail(f"the retry did not fit in the room its own first copy takes: {e}")
    assert again.calls == ["begin", "k1", "k2"]
    assert usage(tmp_path / "published", "alpha") == held  # one copy of the output, not two
    assert sorted(p.name for p in (tmp_path / "published" / "alpha").iterdir()) == ["out"]


def test_an_output_over_the_quota_mid_job_removes_what_the_job_had_published(staged, tmp_path):
    """Another job of the team published between this job's check and its second output: refused under the
    lock, and the job's first output goes too, so nothing partial stays."""
    outputs, _ = staged
    dest = LocalDir(
        tmp_path / "published", "alpha", "out", "job_0001", quota=sum(tree_size(p) for p in outputs.values()) + 10_000
    )
    dest.check_space(sum(tree_size(p) for p in outputs.values()))
    dest.publish(outputs[1], 1, several=True)
    other = tmp_path / "published" / "alpha" / "other"
    other.mkdir()
    (other / "weights.bin").write_bytes(b"x" * (tree_size(outputs[2]) + 10_000))
    with pytest.raises(QuotaExceeded, match="publishing 'out':"):
        dest.publish(outputs[2], 2, several=True)
    assert sorted(p.name for p in (tmp_path / "published" / "alpha").iterdir()) == ["other"]


def test_no_quota_is_no_check(staged, tmp_path):
    assert run(staged, tmp_path, quota=None).calls == ["begin", "k1", "k2"]
