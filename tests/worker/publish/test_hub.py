"""Publishing to the Hub (a local fake that records every commit and file) and to a local directory:
what is uploaded, exactly one commit however often a publish is retried, clear errors without the token."""

from __future__ import annotations

import json
import logging

import pytest
from huggingface_hub import ModelCard
from publish_helpers import TOKEN, compress_tiny, pop_manifest, tree, write_text_file

from worker.errors import HubRefused, HubUnavailable
from worker.publish.card import CardInfo, write_card
from worker.publish.hub import HubRepo, marker
from worker.publish.local import LocalDir

REPO_ID = "team/tiny-nbl"


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    """One tiny compressed output with its card, as the job stages it before publishing."""
    tmp = tmp_path_factory.mktemp("staged")
    compress_tiny(tmp, write_text_file(tmp / "calib.jsonl"), ks=(2,))
    out = tmp / "out"
    report = json.loads((out / "nbl_scores.json").read_text())
    write_card(out, CardInfo(report=report, recipe={"model": {"id": "local:tiny"}}, repo_id=REPO_ID))
    return out


def hub_repo(fake_hub, job_id="job_0001", token=TOKEN, **kw) -> HubRepo:
    return HubRepo(REPO_ID, token, job_id, endpoint=fake_hub.url, **kw)


def test_a_push_uploads_the_model_files_the_card_and_the_plot(fake_hub, staged):
    pub = hub_repo(fake_hub).publish(staged, 2, several=False)

    (commit,) = fake_hub.commits_of(REPO_ID)
    print(
        f"\nrecorded commit of a test push: {json.dumps({'sha': commit.id, 'ref': commit.ref, 'title': commit.title, 'files': commit.added}, indent=2)}"
    )
    print(f"recorded on the job: {pub}")
    assert pub.kind == "hub" and pub.revision == "main" and pub.commit_sha == commit.id and not pub.adopted
    assert pub.uri == f"{fake_hub.url}/{REPO_ID}" and fake_hub.repos[REPO_ID].private  # private by default
    assert marker("job_0001", 2) in commit.title
    assert commit.added == sorted(tree(staged))
    assert {
        "config.json",
        "model.safetensors",
        "modeling_nbl.py",
        "tokenizer.json",
        "nbl_scores.json",
        "README.md",
        "nbl_scores.png",
    } <= set(commit.added)
    files = fake_hub.files(REPO_ID)
    for name, data in tree(staged).items():  # byte for byte what was staged
        assert files[name] == data, name
    card = ModelCard(files["README.md"].decode())
    assert card.data.tags == ["nbl", "compression"] and f'from_pretrained("{REPO_ID}"' in card.text
    assert all(r["authorization"] == f"Bearer {TOKEN}" for r in fake_hub.requests)


@pytest.mark.parametrize(
    "target",
    [{}, {"revision": "nbl-k2"}, {"create_pr": True}, {"create_pr": True, "revision": "dev"}],
    ids=["main", "branch", "pr", "pr-to-branch"],
)
def test_a_retried_publish_adopts_the_first_commit(fake_hub, staged, target):
    first = hub_repo(fake_hub, **target).publish(staged, 2, several=False)
    again = hub_repo(fake_hub, **target).publish(staged, 2, several=False)  # e.g. the worker died before recording

    assert len(fake_hub.commits_of(REPO_ID)) == 1
    assert again.adopted and (again.commit_sha, again.revision, again.uri) == (
        first.commit_sha,
        first.revision,
        first.uri,
    )
    if target.get("create_pr"):
        assert first.revision == "refs/pr/1" and first.uri.endswith("/discussions/1")
        assert fake_hub.repos[REPO_ID].prs[0]["target"] == target.get("revision", "main")
    else:
        assert first.revision == target.get("revision", "main")
        assert fake_hub.commits_of(REPO_ID, first.revision)[0].id == first.commit_sha

    other = hub_repo(fake_hub, job_id="job_0002", **target).publish(staged, 2, several=False)
    assert not other.adopted and other.commit_sha != first.commit_sha  # another job's output is another commit


def test_several_k_go_to_subfolders_one_commit_each(fake_hub, staged):
    repo = hub_repo(fake_hub)
    pubs = [repo.publish(staged, k, several=True) for k in (1, 2)] + [repo.publish(staged, 2, several=True)]
    commits = fake_hub.commits_of(REPO_ID)
    assert [c.id for c in commits] == [pubs[0].commit_sha, pubs[1].commit_sha] and pubs[2].adopted
    assert {"k1/README.md", "k2/README.md", "k2/model.safetensors"} <= set(fake_hub.files(REPO_ID))
    assert repo.location(2, several=True) == (REPO_ID, "k2")


def test_a_401_is_a_clear_user_error_without_the_token(fake_hub, staged, caplog):
    bad = "hf_this_token_is_revoked_canary"
    caplog.set_level(logging.DEBUG)
    repo = hub_repo(fake_hub, token=bad)
    with pytest.raises(HubRefused) as exc:
        repo.publish(staged, 2, several=False)
    msg = str(exc.value)
    assert "401 Unauthorized" in msg and REPO_ID in msg and "set-hub-token" in msg
    assert isinstance(exc.value, ValueError)  # classified as the user's error by the task
    assert bad not in msg and bad not in repr(repo) and exc.value.__cause__ is None and exc.value.__suppress_context__
    assert bad not in caplog.text
    assert not fake_hub.commits_of(REPO_ID)


def test_a_hub_failure_is_a_system_error_and_a_retry_commits_once(fake_hub, staged):
    fake_hub.fail["commit"] = 500
    with pytest.raises(HubUnavailable, match="answered 500"):
        hub_repo(fake_hub).publish(staged, 2, several=False)
    assert not fake_hub.commits_of(REPO_ID)
    pub = hub_repo(fake_hub).publish(staged, 2, several=False)
    assert [c.id for c in fake_hub.commits_of(REPO_ID)] == [pub.commit_sha] and not pub.adopted


def test_an_unreachable_hub_is_a_system_error(staged):
    repo = HubRepo(REPO_ID, TOKEN, "job_0001", endpoint="http://127.0.0.1:9")  # discard port: nothing listens
    with pytest.raises(HubUnavailable, match="cannot reach"):
        repo.publish(staged, 2, several=False)


def test_the_local_directory_gets_the_same_layout(tmp_path, fake_hub, staged):
    local = LocalDir(tmp_path / "published", "alpha", "tiny-nbl", "job_0001")
    pub = local.publish(staged, 2, several=False)
    again = local.publish(staged, 2, several=False)
    assert pub == again and pub.kind == "local_dir" and pub.uri == "local:alpha/tiny-nbl"  # a name, not a path
    hub_repo(fake_hub).publish(staged, 2, several=False)
    hub_files = {p: d for p, d in fake_hub.files(REPO_ID).items() if p != ".gitattributes"}
    published = tree(tmp_path / "published" / "alpha" / "tiny-nbl")
    owner = json.loads(published.pop(".nbl-owner.json"))
    pop_manifest(published)  # the API's listing (nbl/outputs/manifest.py): local outputs only
    assert published == hub_files and owner == {"team": "alpha", "job_id": "job_0001"}  # the same files + marker
    assert sorted(p.name for p in (tmp_path / "published" / "alpha").iterdir()) == ["tiny-nbl"]  # nothing left beside
    several = LocalDir(tmp_path / "published", "alpha", "multi", "job_0001")
    assert several.publish(staged, 4, several=True).uri == "local:alpha/multi/k4"


def test_saved_and_published_files_get_the_umask_mode_not_0600(tmp_path):
    """The safetensors writer saves through a 0600 temporary file; outputs and publish dirs are shared."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        compress_tiny(tmp_path, write_text_file(tmp_path / "calib.jsonl"), ks=(1,))
        out = tmp_path / "out"
        modes = {p: stat.S_IMODE((out / p).stat().st_mode) for p in tree(out)}
        assert "model.safetensors" in modes and set(modes.values()) == {0o644}, modes
        (out / "model.safetensors").chmod(0o600)  # a staged folder from elsewhere, private
        pub = LocalDir(tmp_path / "published", "alpha", "tiny-nbl", "job_0001").publish(out, 1, several=False)
        published = {
            p: stat.S_IMODE((tmp_path / "published" / "alpha" / "tiny-nbl" / p).stat().st_mode) for p in tree(out)
        }
        assert pub.uri.endswith("tiny-nbl") and set(published.values()) == {0o644}, published
    finally:
        os.umask(old)


class ListSink:
    """The pipeline's sink, as plain lists."""

    def __init__(self):
        self.messages, self.outputs = [], []

    def progress(self, stage, fraction, message):
        self.messages.append(message)

    def output(self, k, layers, published):
        self.outputs.append((k, published))


def test_several_k_on_the_hub_get_a_root_card_in_one_more_marked_commit(fake_hub, tmp_path):
    """The Hub renders only the root README.md: the job adds one over the k{K}/ folders, adopted on retry."""
    from worker.pipeline import publish

    result, _ = compress_tiny(tmp_path, write_text_file(tmp_path / "calib.jsonl"), ks=(1, 2))
    outputs = {o["k"]: tmp_path / "out" / f"k{o['k']}" for o in result.outputs}
    selected = {o["k"]: o["replaced_layers"] for o in result.outputs}
    metrics = {
        "base": {"perplexity/wikitext2/ppl": 20.25, "tasks/arc_easy/acc": 0.61},
        "k1": {"perplexity/wikitext2/ppl": 21.5, "tasks/arc_easy/acc": 0.6},
        "k2": {"perplexity/wikitext2/ppl": 23.75, "tasks/arc_easy/acc": 0.57},
    }
    recipe = {"model": {"id": "HuggingFaceTB/SmolLM2-135M"}}
    for k, path in outputs.items():  # as if the base had come from the Hub, with its licence
        report = json.loads((path / "nbl_scores.json").read_text())
        report.update(
            base_model="HuggingFaceTB/SmolLM2-135M",
            base_license="apache-2.0",
            base_fingerprint="hub:HuggingFaceTB/SmolLM2-135M@0123abc",
        )
        (path / "nbl_scores.json").write_text(json.dumps(report))
    sink = ListSink()
    publish(outputs, selected, hub_repo(fake_hub), metrics, recipe, sink)

    commits = fake_hub.commits_of(REPO_ID)
    assert [c.title.rsplit(" ", 2)[-1] for c in commits] == ["k=1]", "k=2]", "root]"]
    root = commits[-1]
    assert root.added == ["README.md"] and marker("job_0001", None) in root.title
    files = fake_hub.files(REPO_ID)
    assert {"README.md", "k1/README.md", "k2/README.md", "k2/model.safetensors"} <= set(files)
    card = ModelCard(files["README.md"].decode())
    assert card.data.base_model == "HuggingFaceTB/SmolLM2-135M" and card.data.license == "apache-2.0"
    assert card.data.tags == ["nbl", "compression"] and card.data.library_name == "transformers"
    text = card.text
    assert "| output | k | replaced layers | wikitext2 ppl ↓ | arc_easy acc ↑ |" in text
    assert "| base model | 0 | – | 20.2500 | 0.6100 |" in text
    for k, layers in selected.items():
        assert f"| [k{k}/](k{k}) | {k} | {', '.join(map(str, layers))} | " in text
    assert "| 23.7500 | 0.5700 |" in text
    assert f'from_pretrained("{REPO_ID}", subfolder="k1", trust_remote_code=True)' in text
    assert any(m.startswith("root card: published at") for m in sink.messages)

    # a retried job (its worker died after the pushes) adopts all three commits, pushes nothing
    again = ListSink()
    publish(outputs, selected, hub_repo(fake_hub), metrics, recipe, again)
    assert [c.id for c in fake_hub.commits_of(REPO_ID)] == [c.id for c in commits]
    assert any(m.startswith("root card: found already published") for m in again.messages)

    # the local directory gets the same root card beside its k{K} folders
    local = LocalDir(tmp_path / "published", "alpha", "multi", "job_0001")
    publish(outputs, selected, local, metrics, recipe, ListSink())
    root_card = (tmp_path / "published" / "alpha" / "multi" / "README.md").read_text()
    assert "| [k2/](k2) | 2 |" in root_card and str(tmp_path) not in root_card
    assert 'from_pretrained("multi", subfolder="k1", trust_remote_code=True)' in root_card
    assert sorted(p.name for p in (tmp_path / "published" / "alpha" / "multi").iterdir()) == [
        ".nbl-owner.json",
        "README.md",
        "k1",
        "k2",
    ]


def test_a_single_output_gets_no_root_card(fake_hub, staged, tmp_path):
    import shutil

    from worker.pipeline import publish

    out = shutil.copytree(staged, tmp_path / "out")  # publish rewrites the card: not the shared fixture's
    publish({2: out}, {2: [1, 2]}, hub_repo(fake_hub), {}, {"model": {"id": "local:tiny"}}, ListSink())
    assert len(fake_hub.commits_of(REPO_ID)) == 1
