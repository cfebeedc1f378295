"""A weight index must not reach outside its model (issue 35, finding 1; worker/engine/loading/weight_files.py).

Team alpha's Hub snapshot (or local folder) had an index mapping every tensor to another team's published
weights: `../../../../home/published/beta/secret/model.safetensors`, an absolute path, or a shard symlinked
out; calibration, the output writer and the load check read beta's file, and the job succeeded with 61 of
66 tensors byte-identical. A FIFO froze the worker in open(); /dev/urandom, a directory or a missing file
each failed with its own `system` error, telling whether a path exists on the worker. Now:

- the loader refuses each such index of a cached Hub snapshot as a `user` error, one message for every
  case, whether the target exists or not; a real snapshot (every file a symlink into its blobs/) loads;
- every other reader of an index refuses it too: calibration's layer source, the output writer, the
  whole-model load, evaluation, the load check, GGUF export, the fetch's hashing;
- through the worker's pipeline in a fresh process, the job fails at load and the other team's file is
  never opened: an audit hook sees Python's opens, inotify the kernel's (safetensors opens in Rust).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from testkit.crafted_snapshot import CASES, INDEX, REV, craft, hub_snapshot, secret_model, sharded_checkpoint
from testkit.models import DATA_DIR, REPO, tiny_model

from worker.engine.loading.weight_files import SHOWN, WeightFileError
from worker.errors import classify


@pytest.fixture
def hub_cache(tmp_path, monkeypatch) -> Path:
    """An offline Hugging Face cache of our own (HF_HUB_OFFLINE: the cached snapshot is the model)."""
    from huggingface_hub import constants

    cache = tmp_path / "hf" / "hub"
    cache.mkdir(parents=True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


@contextlib.contextmanager
def unblocking(fifo: Path):
    """Whenever something waits in open() on `fifo` (a reader blocks there until a writer comes), open it
    for writing and close it, so the reader gets EOF: the test never hangs, and `opened` says it happened."""
    opened: list[bool] = []
    stop = threading.Event()

    def watch():
        while not stop.wait(0.05):
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO while no reader has it open
            except OSError:
                continue
            opened.append(True)
            os.close(fd)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield opened
    finally:
        stop.set()
        thread.join()


def refusal(case: str, tmp: Path, cache: Path) -> tuple[str, WeightFileError]:
    """Load the Hub model `org/evil-<case>` whose cached snapshot's index is crafted as `case` says: (the name
    the index gives, the refusal)."""
    from worker.engine.loading.load import load_model

    secret = secret_model(tmp / case)
    snap = hub_snapshot(cache, f"org/evil-{case}", sharded_checkpoint(tmp / case / "alpha"))
    name = craft(snap, case, secret)
    guard = unblocking(snap / name) if case == "fifo" else contextlib.nullcontext([])
    with guard as opened:
        with pytest.raises(WeightFileError) as caught:
            load_model(f"org/evil-{case}", weights=False)
    assert not opened, "the FIFO was opened"
    return name, caught.value


def test_the_loader_refuses_an_index_reaching_outside_a_hub_snapshot_as_one_user_error(tmp_path, hub_cache):
    """Was: every case loaded (the index was read later, by calibration: beta's weights, a frozen worker, or
    FileNotFoundError / IsADirectoryError classed `system`)."""
    shapes = set()
    for case in CASES:
        name, error = refusal(case, tmp_path, hub_cache)
        failure = classify(error)
        assert failure.type == "user" and not failure.retry, (case, failure)
        message = str(error)
        # the name as quoted: cut at SHOWN characters (the absolute case's tmp path is longer under xdist)
        shown = repr(name if len(name) <= SHOWN else name[:SHOWN] + "...")
        assert message.startswith(f"org/evil-{case}: ") and shown in message, message
        assert str(hub_cache) not in message.replace(shown, ""), message  # no server path of ours
        shapes.add(message.replace(f"org/evil-{case}", "MODEL").replace(shown, "NAME"))
    assert len(shapes) == 1, shapes  # one message whatever the name points at, there or not: no oracle


def test_a_hub_snapshot_just_downloaded_is_checked_before_calibrate(tmp_path, monkeypatch):
    """Online: the snapshot as snapshot_download leaves it (fakes at the Hub's edge only, as in
    test_custom_code.py). Was: loaded, its index read first by calibration."""
    import huggingface_hub

    from worker.engine.loading.load import load_model

    snap = hub_snapshot(tmp_path / "hub", "org/evil", sharded_checkpoint(tmp_path / "alpha"))
    craft(snap, "dotdot", secret_model(tmp_path))
    listing = [SimpleNamespace(rfilename=f.name, size=f.stat().st_size) for f in sorted(snap.iterdir())]
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.utils, "get_session", lambda: SimpleNamespace(head=lambda url, **kw: None))
    monkeypatch.setattr(
        huggingface_hub.HfApi,
        "model_info",
        lambda api, repo_id, revision=None, **kw: SimpleNamespace(sha=REV, siblings=listing),
    )
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", lambda repo_id, name, revision=None, **kw: str(snap / name))
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda *a, **kw: str(snap))
    with pytest.raises(WeightFileError, match="^org/evil: the weights name '[.][.]/"):
        load_model("org/evil", weights=False)


def test_a_real_sharded_hub_snapshot_of_blob_symlinks_loads(tmp_path, hub_cache):
    from worker.engine.calibration.layer_source import CheckpointLayers
    from worker.engine.loading.load import load_model

    src = sharded_checkpoint(tmp_path / "src")
    snap = hub_snapshot(hub_cache, "org/tiny", src)
    assert all((snap / n).is_symlink() for n in json.loads((src / INDEX).read_text())["weight_map"].values())
    lm = load_model("org/tiny", dtype="float32", device="cpu")
    want = tiny_model(seed=0).state_dict()
    assert all(torch.equal(t, want[n]) for n, t in lm.model.state_dict().items())
    layer = CheckpointLayers(snap, torch.float32).layer(1, "cpu")
    assert torch.equal(layer.mlp.down_proj.weight, want["model.layers.1.mlp.down_proj.weight"])


def readers(folder: Path, tmp: Path) -> dict:
    """Every reader of an index, each called on `folder` as its stage calls it."""
    from worker.engine.calibration.layer_source import CheckpointLayers, tensor_files
    from worker.engine.forms.shard_writer import write_shards
    from worker.engine.loading.load import LoadedModel, load_model, load_weights
    from worker.eval.compressed import load_compressed
    from worker.fetch import fetch
    from worker.publish import loadcheck
    from worker.publish.gguf_export import export_gguf

    ref = loadcheck.Reference(
        ids=loadcheck.probe_ids(128), logits=torch.zeros(1, 16, 128), dtype=torch.float32, device="cpu"
    )
    lm = LoadedModel(
        model=None,
        tokenizer=None,
        source="local:evil",
        revision=None,
        fingerprint="dir:x",
        family="llama",
        path=folder,
        dtype=torch.float32,
    )
    (tmp / "out").mkdir()
    return {
        "load": lambda: load_model(str(folder), weights=False),
        "fetch": lambda: fetch(str(folder), None, False, tmp / "home", None),  # hashes the local weights
        "calibrate": lambda: CheckpointLayers(folder, torch.float32).stem("cpu"),
        "write": lambda: write_shards(tmp / "out", folder, tiny_model(seed=0), {}),
        "tensor_files": lambda: tensor_files(folder),
        "load_weights": lambda: load_weights(lm),
        "evaluate": lambda: load_compressed(folder, "float32", "cpu"),
        "check": lambda: loadcheck.check(folder, ref, timeout_s=120),
        "gguf": lambda: export_gguf(folder, tmp / "out" / "model-f16.gguf", "f16"),
    }


READERS = ("load", "fetch", "calibrate", "write", "tensor_files", "load_weights", "evaluate", "check", "gguf")


@pytest.mark.parametrize("reader", READERS)
def test_every_reader_refuses_an_index_naming_another_teams_file(reader, tmp_path):
    """Was: calibrate, write and tensor_files read or listed beta's file; load, fetch and calibrate's
    constructor passed; load_weights, evaluate and check failed in transformers as ValueError or LoadCheckError
    (its own name check, no symlink or FIFO check); gguf ran without looking."""
    folder = sharded_checkpoint(tmp_path / "evil")
    craft(folder, "absolute", secret_model(tmp_path))
    with pytest.raises(WeightFileError, match="which is not a file of the model"):
        readers(folder, tmp_path)[reader]()


CHILD = textwrap.dedent("""
    import json, os, struct, sys, ctypes
    secret_dir, data_dir, out = sys.argv[1:4]
    opened = []

    def audit(event, args):  # Python's own opens (open, os.open, io): the index, JSON, tokenizer files
        if event == "open" and isinstance(args[0], (str, bytes)):
            if os.path.abspath(os.fsdecode(args[0])).startswith(secret_dir + os.sep):
                opened.append(os.fsdecode(args[0]))

    sys.addaudithook(audit)
    libc = ctypes.CDLL(None, use_errno=True)  # the kernel's view: safetensors opens its files in Rust
    watch = libc.inotify_init1(os.O_NONBLOCK)
    assert libc.inotify_add_watch(watch, secret_dir.encode(), 0x1 | 0x20) >= 0  # IN_ACCESS | IN_OPEN

    from nbl.recipe import Calibration, Compression, Recipe
    from worker.errors import RetryPolicy, classify
    from worker.pipeline import run
    from worker.pipeline_io import Options, Paths

    stages = []

    class Sink:
        def progress(self, stage, fraction, message):
            stages.append(stage)

        def __getattr__(self, name):
            return lambda *a, **k: None

    recipe = Recipe(model="org/evil", compression=Compression(ks=(1,)),
                    calibration=Calibration(dataset="c4", num_samples=4, seq_len=16))
    result = {}
    try:
        run(recipe, Sink(), Paths(work_dir=None, data_dir=data_dir, home=os.getcwd()), None,
            Options(device="cpu", fit_check=False, load_check=False, retry=RetryPolicy(attempts=1)))
    except Exception as e:
        result["error"] = {"type": classify(e).type, "message": str(e)}
    kernel = []
    try:
        raw = os.read(watch, 65536)
    except BlockingIOError:
        raw = b""
    while raw:
        wd, mask, cookie, size = struct.unpack_from("iIII", raw)
        if not mask & 0x40000000:  # IN_ISDIR: the folder itself, not a file in it
            kernel.append(raw[16:16 + size].rstrip(b"\\0").decode())
        raw = raw[16 + size:]
    result.update(stages=sorted(set(stages)), opened=opened, kernel=kernel)
    with open(out, "w") as f:
        json.dump(result, f)
""")


@pytest.mark.parametrize("case", ["dotdot", "absolute"])
def test_a_crafted_hub_snapshot_fails_at_load_as_a_user_error_and_reads_nothing(case, tmp_path):
    """The issue's done-criterion, through the pipeline the worker runs (load, then calibrate from the
    checkpoint), in a fresh process with HF_HUB_OFFLINE and its own HF_HOME. Was: load passed, calibration
    opened beta's file and the run went on to score its weights."""
    secret = secret_model(tmp_path)
    snap = hub_snapshot(tmp_path / "hf" / "hub", "org/evil", sharded_checkpoint(tmp_path / "alpha"))
    craft(snap, case, secret)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO),
        "NBL_HOME": str(cwd),
    }
    out = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, os.path.realpath(secret.parent), str(DATA_DIR), str(out)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got["opened"] == [] and got["kernel"] == [], got  # beta's folder: not a file opened or read
    assert got.get("error", {}).get("type") == "user", got
    assert got["stages"] == ["load"], got  # nothing calibrated
    assert "which is not a file of the model" in got["error"]["message"], got
