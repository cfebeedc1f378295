"""`nbl import-gguf` on crafted GGUF files: each malformed file is one line on stderr and exit 2 (the CLI's bad
input), its counts and lengths checked against the file's size before any loop or allocation; a real GGUF's
header (SmolLM2's) reads whole."""

import pytest
from gguf_craft import broken, gguf
from testkit.models import smollm2_gguf

from cli.main import main
from worker.engine.loading.gguf_header import GGUFError, check_gguf

BROKEN = broken()


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_malformed_gguf_is_one_line_and_exit_2(kind, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NBL_MODELS_DIR", str(tmp_path / "models"))
    path = tmp_path / "crafted.gguf"
    path.write_bytes(BROKEN[kind])
    assert main(["import-gguf", str(path), "--name", "crafted"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nbl: error: ") and str(path) in err[0], err
    assert not (tmp_path / "models" / "crafted").exists()


@pytest.mark.parametrize("kind", ["2^63 tensors", "2^62 KVs", "2^62 string length", "2^60-element array"])
def test_a_huge_count_is_refused_by_the_bytes_left(kind, tmp_path):
    """Refused at once, by arithmetic: a loop over 2^60 entries would not end within the test's life."""
    path = tmp_path / "crafted.gguf"
    path.write_bytes(BROKEN[kind])
    with pytest.raises(GGUFError, match="claimed, but the|bytes at offset"):
        check_gguf(path, "crafted.gguf")


def test_the_well_formed_file_the_crafted_ones_start_from_reads(tmp_path):
    path = tmp_path / "good.gguf"
    path.write_bytes(gguf())
    header = check_gguf(path, "good.gguf")
    assert header.metadata["general.architecture"] == "llama" and header.metadata["tokenizer.ggml.tokens"] == 3
    assert [(t.name, t.dims) for t in header.tensors] == [("token_embd.weight", (2, 4))]


def test_a_real_gguf_reads_whole():
    header = check_gguf(smollm2_gguf(), "SmolLM2")
    assert header.metadata["general.architecture"] == "llama"
    assert header.metadata["tokenizer.ggml.tokens"] == 49152 and len(header.tensors) > 100
    assert header.data_start % header.metadata.get("general.alignment", 32) == 0
