"""`nbl compress --quantize`: a fold block output written once more into its SCHEME/ folder by the pipeline's quantize
stage (as a job's), GPTQ fitted on the run's own calibration blocks, said in --json, and with --eval the copy and
the base quantized alike evaluated; the forms that cannot be quantized, and a run without --out, refused at once
with the reason (exit 2), before anything is calibrated."""

from __future__ import annotations

import json

import pytest
from testkit.models import save_tiny_checkpoint

from cli.main import main

RUN = ["--num-samples", "8", "--seq-len", "32", "--k", "1", "--no-load-check", "--json"]


@pytest.mark.slow  # 21 s (a compress run and three quantizations): make test runs it, make test-fast does not
def test_a_fold_block_output_is_quantized_beside_it(tmp_path, text_file, quant_python, monkeypatch, capsys):
    monkeypatch.setattr("worker.quant.quantize.DEFAULT_VENV", quant_python.parents[1])
    base = save_tiny_checkpoint(tmp_path / "base", hidden_size=128, intermediate_size=256, layers=3)
    out = tmp_path / "out"
    argv = ["compress", "--model", str(base), "--dataset", str(text_file), "--form", "fold", "--mode", "block"]
    ev = ["--eval", "--perplexity", "wikitext2", "--max-tokens", "128"]
    assert main([*argv, *RUN, *ev, "--out", str(out), "--quantize", "w8a8"]) == 0
    view = json.loads(capsys.readouterr().out)
    facts = view["quantized"]["k1"]["w8a8"]
    assert facts["path"] == str(out / "w8a8") and facts["calibration_tokens"] == 8 * 32
    base_copy = view["quantized"]["base"]["w8a8"]  # the base quantized alike, for the comparison; never in OUT
    assert base_copy["path"] is None and base_copy["bytes"] > 0
    assert not list(tmp_path.glob(".nbl-base-quantized-*")) and sorted(p.name for p in out.iterdir() if p.is_dir()) == [
        "w8a8"
    ]
    ppl = [v["evaluation"]["perplexity"]["wikitext2"]["ppl"] for v in (facts, base_copy)]
    assert all(p > 1 for p in ppl) and ppl[0] != view["evaluation"]["k1"]["perplexity"]["wikitext2"]["ppl"], ppl
    config = json.loads((out / "w8a8" / "config.json").read_text())
    assert config["quantization_config"]["format"] == "int-quantized"
    assert config["num_hidden_layers"] == 2  # the fold block output, one block removed, quantized
    assert "quantization_config" not in json.loads((out / "config.json").read_text())  # the output itself stays


@pytest.mark.parametrize(
    "form, mode, why",
    [("nbl", "attn", "vLLM plugin"), ("linear", "attn", "replace_with_linear"), ("nbl", "block", "vLLM plugin")],
)
def test_other_forms_are_refused_before_calibrating(form, mode, why, tmp_path, text_file, capsys):
    base = save_tiny_checkpoint(tmp_path / "base")
    argv = ["compress", "--model", str(base), "--dataset", str(text_file), "--form", form, "--mode", mode]
    assert main([*argv, *RUN, "--out", str(tmp_path / "out"), "--quantize", "w4a16"]) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("nbl:")]  # not the checkpoint's progress
    assert len(err) == 1 and "--quantize" in err[0] and why in err[0], err
    assert not (tmp_path / "out").exists()


def test_a_folder_in_the_way_that_is_not_a_quantized_output_is_never_replaced(tmp_path):
    base = save_tiny_checkpoint(tmp_path / "base", hidden_size=128, intermediate_size=256, layers=3)
    (tmp_path / "out-w8a8").mkdir()
    (tmp_path / "out-w8a8" / "notes.txt").write_text("a user's")
    from worker.quant.quantize import quantize

    with pytest.raises(ValueError, match="is not a quantized output"):
        quantize(base, tmp_path / "out-w8a8", "w8a8", [[5] * 8])
    assert (tmp_path / "out-w8a8" / "notes.txt").read_text() == "a user's"


def test_quantize_needs_out(tmp_path, text_file, capsys):
    base = save_tiny_checkpoint(tmp_path / "base")
    argv = ["compress", "--model", str(base), "--dataset", str(text_file), "--form", "fold", "--mode", "block"]
    assert main([*argv, *RUN, "--quantize", "w8a8"]) == 2
    assert "give --out" in capsys.readouterr().err


def test_save_dtype_writes_the_output_as_a_jobs_publish_dtype(tmp_path, text_file, capsys):
    """--save-dtype bfloat16: the output's weights in bfloat16 (a job's publish.dtype), computed in float32."""
    base = save_tiny_checkpoint(tmp_path / "base", hidden_size=128, intermediate_size=256, layers=3)
    argv = ["compress", "--model", str(base), "--dataset", str(text_file), "--form", "fold", "--mode", "block"]
    assert main([*argv, *RUN, "--out", str(tmp_path / "o"), "--save-dtype", "bfloat16"]) == 0
    view = json.loads(capsys.readouterr().out)
    assert view["outputs"][0]["dtype"] == "bfloat16"
    assert json.loads((tmp_path / "o" / "config.json").read_text())["dtype"] == "bfloat16"
