"""GGUF files made by `nbl export` (llama.cpp's converter and quantizer) read by llama.cpp itself: f32 greedy
decoding token-identical to transformers on the same checkpoint in float32 (3 prompts x 16 tokens), the
tokenizer embedded (its ids equal the checkpoint's), q8_0 and q4_k_m load and generate. A tiny random Llama
and the real SmolLM2 (its GGUF -> `nbl import-gguf` -> the base checkpoint; no form that leaves a plain
checkpoint exists yet, so the base is what exports)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from gguf_helpers import REPO, llama_cpp_greedy, transformers_greedy
from testkit.models import save_tiny_checkpoint, smollm2_gguf

pytestmark = pytest.mark.slow

TEXTS = ["The capital of France is", "def fibonacci(n):\n    ", "Once upon a time, in a small village,"]
NEW = 16


def nbl(*args, env: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", *map(str, args), "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def env(tmp_path_factory, gguf_python) -> dict:
    return {**os.environ, "NBL_HOME": str(tmp_path_factory.mktemp("gguf_home")), "NBL_GGUF_PYTHON": str(gguf_python)}


@pytest.fixture(scope="module")
def smollm2(env) -> Path:
    return Path(nbl("import-gguf", smollm2_gguf(), "--name", "smollm2", env=env)["path"])


def prompts(model_dir: Path) -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=False)
    return [tok(t, add_special_tokens=False)["input_ids"] for t in TEXTS]


def export(model_dir: Path, kind: str, env: dict) -> dict:
    out = model_dir.parent / f"{model_dir.name}-{kind}.gguf"
    return nbl("export", model_dir, "--format", "gguf", "--type", kind, "--out", out, env=env)


def test_tiny_llama_f32_is_token_identical(smollm2, env, gguf_python, tmp_path):
    # random weights, SmolLM2's tokenizer (llama.cpp's converter reads only tokenizers it knows)
    tiny = save_tiny_checkpoint(tmp_path / "tiny", vocab=49152, seed=3)
    for f in tiny.glob("tokenizer*"):
        f.unlink()
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(smollm2).save_pretrained(tiny)
    done = export(tiny, "f32", env)
    assert done["arch"] == "llama"
    ids = prompts(tiny)
    got = llama_cpp_greedy(gguf_python, Path(done["path"]), ids, TEXTS, NEW, tmp_path)
    assert got["arch"] == "llama" and got["ids"] == ids
    assert got["tokens"] == transformers_greedy(tiny, ids, NEW)


def test_smollm2_f32_is_token_identical_and_quantized_types_generate(smollm2, env, gguf_python, tmp_path):
    ids = prompts(smollm2)
    reference = transformers_greedy(smollm2, ids, NEW)
    sizes = {}
    for kind in ("f32", "q8_0", "q4_k_m"):
        done = export(smollm2, kind, env)
        sizes[kind] = done["size"]
        got = llama_cpp_greedy(gguf_python, Path(done["path"]), ids, TEXTS, NEW, tmp_path)
        assert got["arch"] == "llama" and got["ids"] == ids, kind  # the tokenizer is embedded
        if kind == "f32":
            assert got["tokens"] == reference
        else:  # quantized: other logits, so other tokens may win; they generate from the vocabulary
            assert all(len(t) == NEW and all(0 <= i < 49152 for i in t) for t in got["tokens"]), kind
            assert sum(a == b for g, r in zip(got["tokens"], reference) for a, b in zip(g, r)) >= NEW, kind
    assert sizes["q4_k_m"] < sizes["q8_0"] < sizes["f32"] / 3


def test_publish_formats_write_into_the_output_and_its_manifest(smollm2, gguf_python, tmp_path):
    """A job's publish.formats (worker/publish/gguf_export.export_formats): model-TYPE.gguf in the output's own
    folder, so the files endpoint's manifest lists it with its sha256 like every other file."""
    import hashlib

    from nbl.outputs import manifest
    from worker.publish.gguf_export import export_formats

    tiny = save_tiny_checkpoint(tmp_path / "tiny", vocab=49152, seed=4)
    for f in tiny.glob("tokenizer*"):
        f.unlink()
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(smollm2).save_pretrained(tiny)
    done = export_formats(tiny, ["safetensors", "gguf:q8_0"], gguf_python)
    assert [Path(d["path"]).name for d in done] == ["model-q8_0.gguf"]
    assert not list(tiny.glob("*.partial")) and not list(tiny.glob("*.f32"))
    manifest.write_for(tiny)
    fd = os.open(tiny, os.O_RDONLY | os.O_DIRECTORY)
    try:
        listed = {e["path"]: e for e in manifest.read(fd)}
    finally:
        os.close(fd)
    for d in done:
        name = Path(d["path"]).name
        assert listed[name]["sha256"] == hashlib.sha256(Path(d["path"]).read_bytes()).hexdigest()
        assert listed[name]["size"] == d["size"]
