"""`nbl compress` end to end on a local tiny checkpoint: outputs, the statistics cache, bad inputs."""

import json

import pytest
from testkit.models import save_tiny_checkpoint

from cli import main as cli
from worker.engine.calibration import calibrate as calibrate_mod
from worker.engine.calibration import stage as calibration_stage


def _run(capsys, *args):
    code = cli.main(["compress", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def _base_args(tiny_dir, text_file, tmp_path, *extra, load_check=False):
    """The fresh-process load check costs a process start per output: only the tests about it run it."""
    return [
        "--model",
        tiny_dir,
        "--dataset",
        text_file,
        "--num-samples",
        12,
        "--seq-len",
        64,
        "--out",
        tmp_path / "out",
        "--json",
        *extra,
        *([] if load_check else ["--no-load-check"]),
    ]


@pytest.mark.slow
def test_several_k_json_and_cache_hit(tiny_dir, text_file, tmp_path, capsys, monkeypatch):
    code, out, err = _run(
        capsys, *_base_args(tiny_dir, text_file, tmp_path, "--k", "1,2", "--criterion", "nmse", load_check=True)
    )
    assert code == 0, err
    r = json.loads(out)
    assert r["calibration"]["cached"] is False
    assert r["calibration"]["tokens"] == 12 * 64 and r["calibration"]["num_samples"] == 12
    assert [s["layer"] for s in r["scores"]] == [0, 1, 2, 3]
    # sums (and so scores) only for the mode asked for
    assert set(r["scores"][0]["attn"]) >= {"cca_bound", "nmse", "cosine"} and "block" not in r["scores"][0]
    assert [(o["k"], len(o["replaced_layers"])) for o in r["outputs"]] == [(1, 1), (2, 2)]
    for o in r["outputs"]:
        assert o["path"].endswith(f"k{o['k']}")
        assert (
            json.loads((tmp_path / "out" / f"k{o['k']}" / "config.json").read_text())["nbl"]["layers"]
            == o["replaced_layers"]
        )
    # the job's pipeline: each output reloaded in a fresh process, its card written once, at publish, and a
    # root card over the k{K} folders
    assert sorted(r["load_check"]) == ["k1", "k2"]
    assert all(c["max_abs_diff"] <= c["tolerance"] and c["class"].startswith("NBL") for c in r["load_check"].values())
    for k in (1, 2):
        card = (tmp_path / "out" / f"k{k}" / "README.md").read_text()
        assert f'"{tmp_path / "out"}", subfolder="k{k}"' in card or f'subfolder="k{k}"' in card, card
    assert "k1" in (tmp_path / "out" / "README.md").read_text()
    # the first choice of k=2 contains k=1's: one-shot ranking
    assert set(r["outputs"][0]["replaced_layers"]) <= set(r["outputs"][1]["replaced_layers"])
    nmse = [s["attn"]["nmse"] for s in r["scores"]]
    assert r["outputs"][0]["replaced_layers"] == [min(range(4), key=nmse.__getitem__)]

    # a run that differs only in k / method / criterion must not calibrate at all
    def boom(*a, **k):
        raise AssertionError("calibration ran despite a cached calibration")

    with monkeypatch.context() as mp:
        mp.setattr(calibration_stage, "calibrate", boom)
        code, out, err = _run(
            capsys, *_base_args(tiny_dir, text_file, tmp_path, "--k", "3", "--method", "drop", "--criterion", "loss")
        )
        assert code == 0, err
        r2 = json.loads(out)
        assert r2["calibration"]["cached"] is True and r2["calibration"]["cache_key"] == r["calibration"]["cache_key"]
        assert [s["attn"]["cca_bound"] for s in r2["scores"]] == [s["attn"]["cca_bound"] for s in r["scores"]]
        assert all("loss_rise" in s["attn"] for s in r2["scores"])
        assert len(r2["outputs"][0]["replaced_layers"]) == 3
    assert calibrate_mod.calibrate is not boom  # the engine's own function is untouched

    # the entry holds the attn sums only: the other mode calibrates again, under the same key
    code, out, err = _run(capsys, *_base_args(tiny_dir, text_file, tmp_path, "--k", "1", "--mode", "block"))
    assert code == 0, err
    r3 = json.loads(out)
    assert r3["calibration"]["cached"] is False and r3["calibration"]["cache_key"] == r["calibration"]["cache_key"]
    assert "attn" not in r3["scores"][0] and "block" in r3["scores"][0]


def test_changed_calibration_misses_the_cache(tiny_dir, text_file, tmp_path, capsys):
    _run(capsys, *_base_args(tiny_dir, text_file, tmp_path, "--k", "1"))
    code, out, _ = _run(capsys, *_base_args(tiny_dir, text_file, tmp_path, "--k", "1", "--seed", "1", "--shuffle"))
    assert code == 0 and json.loads(out)["calibration"]["cached"] is False


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--k", "4"], "k=4 must be below the model's number of layers (4)"),  # preflight, before any data
        (["--k", "0"], "k must be positive"),
        (["--k", "-1"], "k must be positive"),
        (["--k", "1", "--text-field", "body"], "no text field 'body'"),
        (["--k", "1", "--num-samples", "5000"], "blocks of 64 tokens"),
    ],
)
def test_bad_inputs_fail_clearly(tiny_dir, text_file, tmp_path, capsys, extra, message):
    args = _base_args(tiny_dir, text_file, tmp_path, *extra)
    if "--num-samples" in extra:
        i = args.index("--num-samples")
        del args[i : i + 2]
    code, out, err = _run(capsys, *args)
    assert code == 2
    assert message in err
    assert not (tmp_path / "out").exists()


def test_refuses_auto_map_unsupported_and_pickled_models(tmp_path, text_file, capsys):
    # --seq-len within the tiny model's context: the config's own checks (preflight) come first
    auto = save_tiny_checkpoint(tmp_path / "auto")
    cfg = json.loads((auto / "config.json").read_text())
    cfg["auto_map"] = {"AutoModelForCausalLM": "evil.Model"}
    (auto / "config.json").write_text(json.dumps(cfg))
    code, _, err = _run(capsys, "--model", auto, "--dataset", text_file, "--k", "1", "--seq-len", "32")
    assert code == 2 and "auto_map" in err and "trust_remote_code" in err

    other = save_tiny_checkpoint(tmp_path / "other")
    cfg = json.loads((other / "config.json").read_text())
    cfg["model_type"] = "gpt2"
    (other / "config.json").write_text(json.dumps(cfg))
    code, _, err = _run(capsys, "--model", other, "--dataset", text_file, "--k", "1", "--seq-len", "32")
    assert code == 2 and "'gpt2' is not supported" in err and "llama" in err and "qwen2" in err

    pickled = save_tiny_checkpoint(tmp_path / "pickled")
    for f in pickled.glob("*.safetensors"):
        f.unlink()
    (pickled / "pytorch_model.bin").write_bytes(b"not loaded")
    code, _, err = _run(capsys, "--model", pickled, "--dataset", text_file, "--k", "1", "--seq-len", "32")
    assert code == 2 and "safetensors" in err

    code, _, err = _run(
        capsys, "--model", tmp_path / "missing.jsonl", "--dataset", text_file, "--k", "1", "--seq-len", "32"
    )
    assert code == 2


def test_help_lists_options(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["compress", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--criterion", "--mode", "--method", "--num-samples", "--seq-len", "--json", "--shuffle"):
        assert flag in out


@pytest.mark.slow
def test_eval_after_compressing_reports_base_vs_each_k_and_rewrites_the_cards(tiny_dir, text_file, tmp_path, capsys):
    from huggingface_hub import ModelCard

    code, out, err = _run(
        capsys,
        *_base_args(
            tiny_dir, text_file, tmp_path, "--k", "1,2", "--eval", "--perplexity", "wikitext2", "--max-tokens", "256"
        ),
    )
    assert code == 0, err
    evaluation = json.loads(out)["evaluation"]
    assert sorted(evaluation) == ["k1", "k2"]
    for k in (1, 2):
        rep = evaluation[f"k{k}"]  # the report of `nbl eval --json`: the output, its base, the deltas
        ppl, base_ppl = rep["perplexity"]["wikitext2"]["ppl"], rep["base"]["perplexity"]["wikitext2"]["ppl"]
        assert rep["model"]["source"] == str(tmp_path / "out" / f"k{k}")  # reloaded from disk
        assert rep["perplexity"]["wikitext2"]["tokens"] <= 256 and rep["delta"]["perplexity"]["wikitext2"][
            "ppl"
        ] == pytest.approx(ppl - base_ppl)
        card = ModelCard.load(tmp_path / "out" / f"k{k}" / "README.md")
        values = {r.metric_name: r.metric_value for r in card.data.eval_results}
        assert values == {"wikitext2 ppl (base model)": base_ppl, f"wikitext2 ppl (tiny-llama-nbl-attn-k{k})": ppl}
        assert "Not evaluated here" not in card.text
    assert evaluation["k1"]["base"]["cached"] is False

    # the base's evaluation is cached per model and spec; the printed report is base vs each k
    code, out, err = _run(
        capsys,
        *[
            a
            for a in _base_args(
                tiny_dir, text_file, tmp_path, "--k", "2", "--eval", "--perplexity", "wikitext2", "--max-tokens", "256"
            )
            if a != "--json"
        ],
    )
    assert code == 0, err
    assert "(cached)" in out and "wikitext2 ppl" in out and "delta" in out and str(tmp_path / "out") in out


def test_eval_options_are_checked_before_compressing(tiny_dir, text_file, tmp_path, capsys):
    code, _, err = _run(
        capsys,
        *_base_args(tiny_dir, text_file, tmp_path, "--k", "1", "--eval", "--task-file", tmp_path / "missing.jsonl"),
    )
    assert code == 2 and "task file not found" in err and not (tmp_path / "out").exists()
    code, _, err = _run(capsys, "--model", tiny_dir, "--dataset", text_file, "--k", "1", "--eval")
    assert code == 2 and "give --out" in err


def test_the_model_size_limit_is_a_flag_defaulting_to_the_variable(tiny_dir, text_file, tmp_path, capsys, monkeypatch):
    size = sum(f.stat().st_size for f in tiny_dir.glob("*.safetensors"))
    code, _, err = _run(capsys, *_base_args(tiny_dir, text_file, tmp_path, "--k", "1", "--max-model-bytes", size - 1))
    assert code == 2 and "over this server's limit" in err
    monkeypatch.setenv("NBL_MAX_MODEL_BYTES", str(size - 1))
    code, _, err = _run(capsys, *_base_args(tiny_dir, text_file, tmp_path, "--k", "1"))
    assert code == 2 and "over this server's limit" in err
    code, _, err = _run(capsys, *_base_args(tiny_dir, text_file, tmp_path, "--k", "1", "--max-model-bytes", size))
    assert code == 0, err  # the flag wins over the variable


def test_host_cache_budget_spills_hidden_states_with_the_same_scores(
    tiny_dir, text_file, tmp_path, capsys, monkeypatch
):
    spill = tmp_path / "spill"  # beside the statistics directory (tmp_path/stats here)
    args = [
        "--model",
        tiny_dir,
        "--dataset",
        text_file,
        "--num-samples",
        12,
        "--seq-len",
        64,
        "--k",
        "1",
        "--json",
        "--no-cache",
    ]
    monkeypatch.setenv("NBL_STATS_DIR", str(tmp_path / "stats"))
    code, out, err = _run(capsys, *args)
    assert code == 0, err
    assert not spill.exists()
    in_memory = json.loads(out)["scores"]
    monkeypatch.setenv("NBL_HOST_CACHE_BYTES", "0")  # everything to disk
    code, out, err = _run(capsys, *args)
    assert code == 0, err
    spilt = json.loads(out)["scores"]  # equal up to the last bits (the float32 products' alignment may differ)
    for got, want in zip(spilt, in_memory):
        assert got["attn"].keys() == want["attn"].keys()
        for key, value in want["attn"].items():  # a non-finite score (a singular layer's cond) is null in JSON
            assert got["attn"][key] == (None if value is None else pytest.approx(value, rel=1e-12)), key
    assert spill.is_dir() and not list(spill.iterdir())  # spilt there, and removed after the run
    code, _, err = _run(capsys, *args, "--host-cache-bytes", "-1")
    assert code == 2 and "number of bytes" in err


@pytest.mark.slow
def test_an_output_that_does_not_reproduce_the_model_in_memory_exits_1(
    tiny_dir, text_file, tmp_path, capsys, monkeypatch
):
    """The fresh-process load check of a job runs for `nbl compress` too: a reference that the reloaded
    output cannot match (logits shifted after they were taken) fails the run, and no card is written."""
    from dataclasses import replace

    from worker.publish import loadcheck

    taken = loadcheck.reference
    monkeypatch.setattr(loadcheck, "reference", lambda model: replace(taken(model), logits=taken(model).logits + 1.0))
    code, out, err = _run(capsys, *_base_args(tiny_dir, text_file, tmp_path, "--k", "1", load_check=True))
    assert code == 1 and "does not reproduce the compressed model" in err and out == "", err
    assert not (tmp_path / "out" / "README.md").exists()
