"""`nbl import-gguf` writes a GGUF's weights in the precision they were stored with (gguf_dtype.py): bfloat16 from
a quantized GGUF, so the real SmolLM2 Q4_1 is a 269 MB checkpoint, not a 538 MB float32 one, and a job's output
inherits bfloat16 through publish.dtype auto; a float32 or float16 GGUF is kept as it is; --dtype overrides."""

import json

import pytest
from safetensors import safe_open
from testkit.models import smollm2_gguf

from cli.main import main
from worker.engine.loading.gguf_dtype import BF16, F16, F32, import_dtype
from worker.engine.loading.gguf_header import Header, Tensor, check_gguf

Q4_1, Q8_0 = 3, 8  # ggml block formats


def header(*types: int, norm: int = F32) -> Header:
    tensors = [Tensor(f"blk.{i}.w", (64, 64), t, 0) for i, t in enumerate(types)]
    return Header(3, {}, (*tensors, Tensor("blk.0.norm", (64,), norm, 0)), 0)


@pytest.mark.parametrize(
    "types, expected",
    [
        ((F32, F32), "float32"),  # float32 on purpose
        ((F16, F32), "float16"),
        ((BF16,), "bfloat16"),
        ((Q4_1, F32), "bfloat16"),  # one quantized matrix: the file holds a few bits a weight
        ((Q8_0, F16), "bfloat16"),
    ],
)
def test_the_matrices_types_decide(types, expected):
    assert import_dtype(header(*types)) == expected


def test_norms_stored_f32_do_not_make_a_quantized_file_float32():
    assert import_dtype(header(Q4_1, norm=F32)) == "bfloat16"
    assert import_dtype(header(F16, norm=F32)) == "float16"


def test_the_real_smollm2_q4_is_bfloat16():
    assert import_dtype(check_gguf(smollm2_gguf(), "SmolLM2")) == "bfloat16"


def _weights(path) -> tuple[str, set, int]:
    config = json.loads((path / "config.json").read_text())
    with safe_open(str(path / "model.safetensors"), "pt") as f:
        kinds = {f.get_slice(n).get_dtype() for n in f.keys()}
    return config["dtype"], kinds, (path / "model.safetensors").stat().st_size


@pytest.mark.slow  # the real SmolLM2 GGUF converted, 26-30 s a case: make test runs it, make test-fast does not
@pytest.mark.parametrize("flags, dtype, kind", [((), "bfloat16", "BF16"), (("--dtype", "float32"), "float32", "F32")])
def test_import_gguf_writes_the_dtype_and_says_it(flags, dtype, kind, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NBL_MODELS_DIR", str(tmp_path / "models"))
    assert main(["import-gguf", str(smollm2_gguf()), "--name", "smollm2", *flags, "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    stored, kinds, size = _weights(tmp_path / "models" / "smollm2")
    assert (said["dtype"], stored, kinds) == (dtype, dtype, {kind})
    assert said["bytes"] == size
    assert (size < 300e6) == (dtype == "bfloat16")  # 134.5M parameters: 269 MB in bfloat16, 538 MB in float32
