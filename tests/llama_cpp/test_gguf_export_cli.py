"""`nbl export`'s refusals: one line and exit 2 before llama.cpp runs (argparse's own for its flags)."""

from __future__ import annotations

import json

import pytest

from cli.main import main


def run(capsys, *args) -> tuple[int, str]:
    try:
        code = main(["export", *map(str, args)])
    except SystemExit as e:  # argparse
        code = e.code
    return code, capsys.readouterr().err


def checkpoint(path, config: dict):
    path.mkdir()
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--format", "gguf", "--type", "q4_k_m"], "required: --out"),
        (["--format", "onnx", "--type", "f32", "--out", "x.gguf"], "invalid choice: 'onnx'"),
        (["--format", "gguf", "--type", "q5_k", "--out", "x.gguf"], "invalid choice: 'q5_k'"),
    ],
)
def test_flags(capsys, tmp_path, args, needle):
    code, err = run(capsys, tmp_path, *args)
    assert code == 2 and needle in err


def test_refusals_are_one_line(capsys, tmp_path):
    llama = checkpoint(tmp_path / "llama", {"architectures": ["LlamaForCausalLM"]})
    nbl = checkpoint(
        tmp_path / "nbl",
        {
            "architectures": ["NblLlamaForCausalLM"],
            "model_type": "nbl_llama",
            "nbl": {"mode": "attn", "method": "nbl", "layers": [3]},
        },
    )
    cases = [
        ((tmp_path / "absent", "--out", tmp_path / "x.gguf"), "not a checkpoint directory"),
        ((llama, "--out", tmp_path / "x.bin"), "must name a .gguf file"),
        ((llama, "--out", tmp_path / "no" / "x.gguf"), "directory does not exist"),
        ((nbl, "--out", tmp_path / "x.gguf"), "nbl-form output"),
        ((tmp_path, "--out", tmp_path / "x.gguf"), "no config.json"),
    ]
    for (src, *rest), needle in cases:
        code, err = run(capsys, src, "--format", "gguf", "--type", "f16", *rest)
        assert code == 2 and needle in err and err.startswith("nbl: error:") and err.count("\n") == 1, err
    assert not (tmp_path / "x.gguf").exists()


def test_a_missing_gguf_venv_is_named(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("NBL_GGUF_PYTHON", str(tmp_path / "nowhere" / "python"))
    llama = checkpoint(tmp_path / "llama", {"architectures": ["LlamaForCausalLM"]})
    code, err = run(capsys, llama, "--format", "gguf", "--type", "f32", "--out", tmp_path / "x.gguf")
    assert code == 2 and "make gguf-env" in err and err.count("\n") == 1
