"""A job asking for GGUF on a worker without the GGUF venv fails before anything is loaded or calibrated
(a ValueError: the job's `user` failure), naming `make gguf-env`; one whose fold block output llama.cpp could not
take (the base's class and config, nbl/outputs/gguf_assumed.py) fails once the base is loaded."""

from __future__ import annotations

import pytest

from nbl.recipe import Calibration, Compression, Publishing, Recipe
from worker.pipeline import run
from worker.pipeline_io import Options, Paths


def test_no_gguf_venv_fails_first(tmp_path):
    recipe = Recipe(
        model=str(tmp_path / "never-read"),
        compression=Compression(ks=(1,)),
        publishing=Publishing(local_dir="x", formats=("safetensors", "gguf:f16")),
    )
    paths = Paths(work_dir=tmp_path / "work", gguf_python=tmp_path / "none" / "python")
    with pytest.raises(ValueError, match="make gguf-env"):
        run(recipe, sink=None, paths=paths, destination=None, options=Options(local_paths=True))
    assert not (tmp_path / "work").exists()


def test_a_base_llama_cpp_cannot_take_fails_before_calibrating(tmp_path):
    """A fold block output is the base's class with fewer layers: a Qwen3-MoE without normalized top-k weights
    (transformers' default; llama.cpp's qwen3moe assumes them) fails once loaded, never after calibrating."""
    from testkit.models import save_tiny_checkpoint

    model = save_tiny_checkpoint(tmp_path / "moe", "qwen3_moe", layers=3)
    exe = tmp_path / "venv" / "python"  # present: the venv check passes, and export is never reached
    exe.parent.mkdir()
    exe.write_text("")
    recipe = Recipe(
        model=str(model),
        compression=Compression(ks=(1,), mode="block", form="fold"),
        calibration=Calibration(num_samples=2, seq_len=16),
        publishing=Publishing(local_dir="x", formats=("safetensors", "gguf:f16")),
    )
    paths = Paths(work_dir=tmp_path / "work", gguf_python=exe, home=tmp_path / "home")
    stages = []

    class Sink:  # records the stages reached; the run fails before any result
        def progress(self, stage, fraction, message):
            stages.append(stage)

        def __getattr__(self, name):  # estimate, warning: nothing to record
            return lambda *a, **k: None

    with pytest.raises(ValueError, match="the base model .* has norm_topk_prob = False, and llama.cpp's qwen3moe"):
        run(recipe, sink=Sink(), paths=paths, destination=None, options=Options(local_paths=True))
    assert set(stages) == {"load"} and not list((tmp_path / "work").rglob("*.safetensors"))
