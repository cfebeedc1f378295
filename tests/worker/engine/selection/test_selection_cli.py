"""`nbl compress --criterion greedy|auto`, `--k auto` and the selection data, on a tiny model: the layers saved
are the ones the selection record chose, measured on the data it names, with as many tokens as it says."""

from __future__ import annotations

import json
import math
import re

import pytest

from cli import main as cli


def run(args, capsys):
    code = cli.main(["compress", *args, "--json", "--no-load-check"])
    out = capsys.readouterr()
    return code, out


BASE = ["--num-samples", "12", "--seq-len", "32"]


def test_greedy_on_the_held_out_tenth_by_default(tiny_dir, text_file, capsys):
    code, out = run(
        ["--model", str(tiny_dir), "--dataset", str(text_file), *BASE, "--criterion", "greedy", "--k", "1,2"], capsys
    )
    assert code == 0, out.err
    view = json.loads(out.out)
    sel = view["selection"]
    assert sel["data"]["source"] == "calibration held-out" and sel["data"]["in_distribution"] is True
    assert sel["data"]["num_samples"] == 1 and sel["tokens"] == 31  # a tenth of 12 blocks: 1 block of 32
    outputs = {o["k"]: o for o in view["outputs"]}
    assert {o["criterion"] for o in outputs.values()} == {"greedy"}
    assert set(outputs[1]["replaced_layers"]) < set(outputs[2]["replaced_layers"])  # nested
    assert [s["added"] for s in sel["greedy_steps"]] == [
        outputs[1]["replaced_layers"][0],
        *(set(outputs[2]["replaced_layers"]) - set(outputs[1]["replaced_layers"])),
    ]
    for t in sel["tried"]:
        assert t["layers"] == outputs[t["k"]]["replaced_layers"] and t["heldout_ppl"] > 0
    assert sel["greedy_steps"][1]["heldout_ppl"] == pytest.approx(sel["tried"][1]["heldout_ppl"])


def test_k_auto_with_criterion_auto_on_a_selection_dataset(tiny_dir, text_file, tmp_path, capsys):
    code, out = run(
        [
            "--model",
            str(tiny_dir),
            "--dataset",
            str(text_file),
            *BASE,
            "--criterion",
            "auto",
            "--k",
            "auto",
            "--max-ppl-increase",
            "1e9",
            "--selection-dataset",
            str(text_file),
            "--selection-split",
            "train",
            "--selection-samples",
            "3",
        ],
        capsys,
    )
    assert code == 0, out.err
    sel = json.loads(out.out)["selection"]
    assert sel["data"]["in_distribution"] is True and sel["data"]["split"] == "train"  # the calibration's own file
    assert sel["tokens"] == 3 * 31 and sel["k"] == 3  # any rise fits a budget of 1e9: the tiny model's 4 layers - 1
    assert {t["criterion"] for t in sel["tried"]} == {"cca", "cosine", "nmse", "greedy"}
    best = min(t["heldout_ppl"] for t in sel["tried"] if t["k"] == 3)
    won = next(t for t in sel["tried"] if t["k"] == 3 and t["criterion"] == sel["criterion"])
    assert won["heldout_ppl"] == best and math.isfinite(best)


def test_k_auto_needs_a_budget_and_a_budget_needs_k_auto(tiny_dir, capsys):
    for args in (["--k", "auto"], ["--k", "2", "--max-ppl-increase", "0.1"]):
        code, out = run(["--model", str(tiny_dir), *args], capsys)
        assert code == 2 and "--k auto and --max-ppl-increase go together" in out.err


def test_the_table_names_the_selection_and_every_set_measured(tiny_dir, text_file, capsys):
    code = cli.main(
        [
            "compress",
            "--model",
            str(tiny_dir),
            "--dataset",
            str(text_file),
            *BASE,
            "--criterion",
            "auto",
            "--k",
            "2",
            "--no-load-check",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "selection on calibration held-out (in-distribution): 31 tokens" in out
    rows = [line for line in out.splitlines() if line[2:].startswith("k=2 ")]
    assert sorted(re.search(r"k=2\s+(\w+)", line).group(1) for line in rows) == ["cca", "cosine", "greedy", "nmse"]
    assert sum(line.startswith("*") for line in rows) == 1  # the one kept


def test_nbl_wait_prints_the_winner_and_the_table():
    from cli.client.format import job_lines

    job = {
        "id": "job_1",
        "status": "succeeded",
        "spec": {"compression": {"criterion": "auto", "k": "auto"}},
        "selected_layers": [{"k": 2, "mode": "attn", "layers": [1, 3], "criterion": "greedy"}],
        "selection": {
            "tried": [
                {"k": 2, "criterion": "cca", "layers": [0, 1], "heldout_ppl": 30.5},
                {"k": 2, "criterion": "greedy", "layers": [1, 3], "heldout_ppl": None},
            ]
        },
    }
    text = "\n".join(job_lines(job))
    assert "k=2: layers [1, 3] (chosen by greedy)" in text
    assert "selection k=2 cca: ppl 30.500 layers [0, 1]" in text and "selection k=2 greedy: ppl n/a" in text


def test_selection_on_the_calibration_dataset_takes_the_blocks_after_the_calibrations(text_file):
    from types import SimpleNamespace

    from testkit.models import tiny_tokenizer

    from worker.engine.calibration.data import DatasetSpec, load_texts, make_blocks
    from worker.engine.config import CompressConfig
    from worker.engine.selection.stage import selection_data

    tok = tiny_tokenizer()
    spec = DatasetSpec(str(text_file))
    cfg = CompressConfig(
        model="m",
        dataset=spec,
        ks=[1],
        num_samples=12,
        seq_len=32,
        shuffle=True,
        seed=3,
        criterion="greedy",
        selection=spec,
        selection_samples=3,
    )
    blocks, data, split = selection_data(cfg, SimpleNamespace(tokenizer=tok), None)
    every = make_blocks(load_texts(spec), tok, 15, 32, True, 3)
    assert blocks.tolist() == every[12:].tolist() and data["in_distribution"] is True and split is None
    calibration = {tuple(b) for b in every[:12].tolist()}
    assert not any(tuple(b) in calibration for b in blocks.tolist())


def test_a_model_larger_than_its_device_is_selected_layer_by_layer_with_the_same_result(
    tiny_dir, text_file, capsys, monkeypatch
):
    """On a GPU too small for the whole model (placement.max_memory_for answers a spread), the greedy's sets read
    their layers from the checkpoint again instead of loading the model: the same sets, the same losses."""
    from worker.engine.selection import stage as selection_stage

    args = ["--model", str(tiny_dir), "--dataset", str(text_file), *BASE, "--criterion", "greedy", "--k", "2"]
    code, out = run(args, capsys)
    assert code == 0, out.err
    whole = json.loads(out.out)["selection"]
    loaded = []
    monkeypatch.setattr(selection_stage, "max_memory_for", lambda path, devices: {0: 1, "cpu": 1})
    monkeypatch.setattr(selection_stage, "load_weights", lambda lm, *a: loaded.append(lm))
    code, out = run(args, capsys)
    assert code == 0, out.err
    streamed = json.loads(out.out)["selection"]
    assert loaded == []  # never loaded whole
    assert [t["layers"] for t in streamed["tried"]] == [t["layers"] for t in whole["tried"]]
    for a, b in zip(streamed["greedy_steps"], whole["greedy_steps"]):
        assert a["added"] == b["added"] and a["heldout_ppl"] == pytest.approx(b["heldout_ppl"], rel=1e-6)
