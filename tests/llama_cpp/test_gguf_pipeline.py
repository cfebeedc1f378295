"""A job asking for GGUF on a worker without the GGUF venv fails before anything is loaded or calibrated
(a ValueError: the job's `user` failure), naming `make gguf-env`."""

from __future__ import annotations

import pytest

from nbl.recipe import Compression, Publishing, Recipe
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
