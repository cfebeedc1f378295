"""The load check: a saved output reloaded in a fresh process must generate and reproduce the compressed
model's logits; a broken checkpoint is caught before anything is published."""

from __future__ import annotations

import pytest
from publish_helpers import compress_tiny
from safetensors.torch import load_file, save_file

from worker.publish.loadcheck import LoadCheckError, check, probe_ids


@pytest.fixture
def output(tmp_path, text_file):
    result, refs = compress_tiny(tmp_path, text_file, ks=(2,))
    (o,) = result.outputs
    return tmp_path / "out", refs[2], o["replaced_layers"]


def test_a_good_output_passes(output):
    path, ref, _ = output
    res = check(path, ref)
    assert res["class"] == "NBLLlamaForCausalLM"
    assert res["max_abs_diff"] <= res["tolerance"] <= 1e-4 * max(1.0, ref.logits.abs().max().item())


def test_corrupted_weights_are_caught(output):
    """One linear map a little off: the checkpoint still loads and generates, but is not the model we built."""
    path, ref, layers = output
    weights = load_file(path / "model.safetensors")
    name = f"model.layers.{layers[0]}.self_attn.linear.weight"
    weights[name] = weights[name] * 1.01
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(LoadCheckError, match="does not reproduce the compressed model"):
        check(path, ref)


@pytest.mark.parametrize("damage", ["truncated weights", "no modeling file"])
def test_an_output_that_does_not_load_is_caught(output, damage):
    path, ref, _ = output
    if damage == "truncated weights":
        data = (path / "model.safetensors").read_bytes()
        (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    else:
        (path / "modeling_nbl.py").unlink()
    with pytest.raises(LoadCheckError, match="does not load in a fresh process"):
        check(path, ref)


def test_probe_ids_stay_inside_the_vocabulary():
    ids = probe_ids(128)
    assert ids.shape == (1, 16) and int(ids.max()) < 128 and len(set(ids.tolist()[0])) > 8


def test_a_cancel_stops_the_fresh_process_within_seconds(output):
    """The check polls the job's cancel while its child loads (worker/subproc.py); it used to wait for the child
    (up to NBL_LOAD_CHECK_TIMEOUT). The child's group is killed whole."""
    import time

    from testkit.fake_converter import in_session, running, session

    from worker.pipeline_io import Cancelled

    path, ref, _ = output
    seen: set[int] = set()

    def should_stop():  # a job's sink: Cancelled at the second poll, while the child is still loading
        seen.update(filter(None, map(session, running(b'sys.modules["worker"] = None'))))
        if len(seen) and should_stop.polls:
            raise Cancelled("cancelled by request")
        should_stop.polls += 1
        return False

    should_stop.polls = 0
    start = time.monotonic()
    with pytest.raises(Cancelled):
        check(path, ref, should_stop=should_stop)
    assert time.monotonic() - start < 15
    assert seen and not any(in_session(sid) for sid in seen)
