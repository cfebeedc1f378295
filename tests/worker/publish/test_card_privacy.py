"""What a published output says of the request (issue 24 §4): the card is public on the Hub, so the webhook_url
(whose query may hold a token) is never on it, and `metadata` only with `publish.card_metadata: true`. Checked
on every byte published, to the Hub (a local fake) and to a local directory, several outputs and their root card."""

from __future__ import annotations

import shutil

import pytest
from publish_helpers import TOKEN, compress_tiny, tree, write_text_file

from nbl.recipe import from_request
from nbl.request import JobCreate
from worker.publish.hub import HubRepo
from worker.publish.local import LocalDir

HOOK_SECRET, META_SECRET = "whsec-in-the-query-7d1f", "meta-secret-value-93ab"
REQUEST = {
    "model": {"id": "local:tiny"},
    "compression": {"k": [1, 2]},
    "webhook_url": f"https://hooks.example.com/nbl?token={HOOK_SECRET}",
    "metadata": {"ci_token": META_SECRET, "branch": "main"},
}


class Sink:
    def progress(self, stage, fraction, message): ...
    def output(self, k, layers, published): ...


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("private")
    result, _ = compress_tiny(tmp, write_text_file(tmp / "calib.jsonl"), ks=(1, 2))
    return {o["k"]: (tmp / "out" / f"k{o['k']}", o["replaced_layers"]) for o in result.outputs}


def publish(outputs, tmp_path, destination, publish_spec: dict) -> None:
    from worker.pipeline import publish as run_publish

    staged = {k: shutil.copytree(path, tmp_path / "staged" / f"k{k}") for k, (path, _) in outputs.items()}
    recipe = from_request(JobCreate.model_validate({**REQUEST, "publish": publish_spec})).request
    run_publish(staged, {k: layers for k, (_, layers) in outputs.items()}, destination, {}, recipe, Sink())


def leaks(files: dict[str, bytes]) -> dict[str, list[str]]:
    return {
        secret: sorted(p for p, data in files.items() if secret.encode() in data)
        for secret in (HOOK_SECRET, "hooks.example.com", META_SECRET)
    }


@pytest.mark.parametrize("card_metadata", [None, False])
def test_the_hub_gets_neither_the_webhook_url_nor_the_metadata(fake_hub, outputs, tmp_path, card_metadata):
    spec = {"repo_id": "team/private-card"} | ({} if card_metadata is None else {"card_metadata": card_metadata})
    publish(outputs, tmp_path, HubRepo("team/private-card", TOKEN, "job_0001", endpoint=fake_hub.url), spec)
    files = fake_hub.files("team/private-card")
    assert {"README.md", "k1/README.md", "k2/README.md"} <= set(files)
    assert leaks(files) == {HOOK_SECRET: [], "hooks.example.com": [], META_SECRET: []}
    assert b'"id": "local:tiny"' in files["k1/README.md"]  # the rest of the request is still quoted


def test_card_metadata_true_quotes_the_metadata_but_never_the_webhook_url(outputs, tmp_path):
    publish(
        outputs,
        tmp_path,
        LocalDir(tmp_path / "published", "alpha", "shared", "job_0002"),
        {"local_dir": "shared", "card_metadata": True},
    )
    files = tree(tmp_path / "published" / "alpha" / "shared")
    assert leaks(files) == {HOOK_SECRET: [], "hooks.example.com": [], META_SECRET: ["k1/README.md", "k2/README.md"]}


def test_a_local_output_by_default_carries_no_metadata(outputs, tmp_path):
    publish(outputs, tmp_path, LocalDir(tmp_path / "published", "alpha", "quiet", "job_0003"), {"local_dir": "quiet"})
    assert leaks(tree(tmp_path / "published" / "alpha" / "quiet")) == {
        HOOK_SECRET: [],
        "hooks.example.com": [],
        META_SECRET: [],
    }


def test_card_metadata_is_validated_and_stored_only_when_given():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="card_metadata"):
        JobCreate.model_validate({**REQUEST, "publish": {"local_dir": "x", "card_metadata": "yes"}})
    plain = JobCreate.model_validate({**REQUEST, "publish": {"local_dir": "x"}}).model_dump(mode="json")
    assert plain["publish"] == {"local_dir": "x", "overwrite": False}  # stored and hashed as before the field
    schema = JobCreate.model_json_schema()["$defs"]
    assert (
        "card_metadata" in schema["HubPublish"]["properties"]
        and "card_metadata" in schema["LocalPublish"]["properties"]
    )
