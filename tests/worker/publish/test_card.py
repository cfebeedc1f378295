"""The model card: written into every saved output (by `nbl compress` too), with a plot; its metadata
parses back with huggingface_hub, model-index included."""

from __future__ import annotations

import json

import pytest
from huggingface_hub import ModelCard, metadata_load

from worker.publish.card import PLOT, CardInfo, card_text, eval_rows

METRICS = {
    "base": {
        "perplexity/wikitext2/ppl": 20.25,
        "perplexity/wikitext2/tokens": 4096.0,
        "tasks/arc_easy/acc": 0.61,
        "speed/decode_tokens_per_s": 50.0,
        "speed/kv_cache_bytes_per_token": 4608.0,
        "params/non_embedding_params": 106_000_000.0,
    },
    "compressed": {
        "perplexity/wikitext2/ppl": 22.5,
        "perplexity/wikitext2/tokens": 4096.0,
        "tasks/arc_easy/acc": 0.58,
        "speed/decode_tokens_per_s": 60.0,
        "speed/kv_cache_bytes_per_token": 3993.6,
        "params/non_embedding_params": 103_000_000.0,
    },
}


def hub_report(report: dict) -> dict:
    """A report as if the base had come from the Hub, with its licence."""
    return {
        **report,
        "base_model": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "base_license": "apache-2.0",
        "base_fingerprint": "hub:HuggingFaceTB/SmolLM2-135M-Instruct@0123abc",
    }


def test_nbl_compress_writes_a_card_and_plot_into_every_output(tmp_path, text_file, tiny_dir):
    from cli.main import main

    out = tmp_path / "out"
    assert (
        main(
            [
                "compress",
                "--model",
                str(tiny_dir),
                "--dataset",
                str(text_file),
                "--num-samples",
                "8",
                "--seq-len",
                "32",
                "--k",
                "1,2",
                "--out",
                str(out),
                "--json",
                "--no-load-check",
            ]
        )
        == 0
    )
    for k in (1, 2):
        d = out / f"k{k}"
        assert (d / PLOT).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        report = json.loads((d / "nbl_scores.json").read_text())
        card = ModelCard.load(d / "README.md")
        assert card.data.library_name == "transformers" and card.data.tags == ["nbl", "compression"]
        assert card.data.base_model is None  # a local checkpoint has no Hub id to name
        text = card.text
        assert "https://arxiv.org/abs/2505.21077" in text
        assert f"Replaced layers: **{report['replaced_layers']}**" in text
        assert f"--k {k}" in text and "nbl compress" in text  # the exact recipe
        assert "Weights: float32." in text and report["dtype"] == "float32"  # nbl compress: the compute dtype
        assert f"![per-layer scores, replaced layers marked]({PLOT})" in text
        assert "trust_remote_code=True" in text and "Not evaluated here" in text
        for layer in report["replaced_layers"]:
            assert f"| {layer} | ✔ |" in text


def test_card_metadata_parses_back_with_model_index(tmp_path, text_file, tiny_dir):
    from cli.main import main

    main(
        [
            "compress",
            "--model",
            str(tiny_dir),
            "--dataset",
            str(text_file),
            "--num-samples",
            "8",
            "--seq-len",
            "32",
            "--k",
            "2",
            "--out",
            str(tmp_path / "out"),
            "--json",
            "--no-load-check",
        ]
    )
    report = hub_report(json.loads((tmp_path / "out" / "nbl_scores.json").read_text()))
    recipe = {"model": {"id": "HuggingFaceTB/SmolLM2-135M-Instruct"}, "compression": {"k": 2, "mode": "attn"}}
    path = tmp_path / "README.md"
    path.write_text(card_text(CardInfo(report=report, metrics=METRICS, recipe=recipe, repo_id="team/smol-nbl")))

    meta = metadata_load(path)
    assert meta["base_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct" and meta["license"] == "apache-2.0"
    assert meta["tags"] == ["nbl", "compression"] and meta["library_name"] == "transformers"
    (entry,) = meta["model-index"]
    assert entry["name"] == "SmolLM2-135M-Instruct-nbl-attn-k2"

    card = ModelCard.load(path)  # parses model-index back into EvalResults
    results = {(r.dataset_type, r.metric_name): r.metric_value for r in card.data.eval_results}
    assert results == {
        ("Salesforce/wikitext", "wikitext2 ppl (base model)"): 20.25,
        ("Salesforce/wikitext", "wikitext2 ppl (SmolLM2-135M-Instruct-nbl-attn-k2)"): 22.5,
        ("allenai/ai2_arc", "arc_easy acc (base model)"): 0.61,
        ("allenai/ai2_arc", "arc_easy acc (SmolLM2-135M-Instruct-nbl-attn-k2)"): 0.58,
    }
    text = card.text
    assert '"id": "HuggingFaceTB/SmolLM2-135M-Instruct"' in text  # the job request as the recipe
    assert 'from_pretrained("team/smol-nbl", trust_remote_code=True)' in text
    assert "| wikitext2 perplexity ↓ | 20.250 | 22.500 | +2.250 (+11.1%) |" in text
    assert "| KV cache bytes/token ↓ | 4,608 | 3,994 | ×0.87 |" in text


def test_eval_rows_cover_perplexity_accuracy_speed_kv_and_params():
    labels = [r[0] for r in eval_rows(METRICS["base"], METRICS["compressed"])]
    assert labels == [
        "wikitext2 perplexity ↓",
        "arc_easy acc ↑",
        "decode tokens/s ↑",
        "KV cache bytes/token ↓",
        "parameters (non-embedding)",
    ]


@pytest.mark.parametrize("criterion", ["cca", "loss"])
def test_plot_skips_layers_without_the_score(tmp_path, criterion):
    from worker.publish.plot import plot_series, score_plot

    report = {
        "recipe": {"mode": "attn", "criterion": criterion},
        "replaced_layers": [1],
        "layers": [{"layer": i, "attn": {"cca_bound": 1.0 + i}} for i in range(3)],
    }
    series = plot_series(report)
    if criterion == "cca":
        assert series[1:] == ([0, 1, 2], [1.0, 2.0, 3.0], {1}) and score_plot(report, tmp_path / "p.png")
    else:  # no loss_rise recorded: no plot, and no file
        assert series is None and score_plot(report, tmp_path / "p.png") is None
        assert not (tmp_path / "p.png").exists()


@pytest.mark.slow
def test_nbl_eval_card_rewrites_the_card_with_its_results(tmp_path, text_file, tiny_dir, capsys):
    from cli.main import main

    out = tmp_path / "out"
    main(
        [
            "compress",
            "--model",
            str(tiny_dir),
            "--dataset",
            str(text_file),
            "--num-samples",
            "8",
            "--seq-len",
            "32",
            "--k",
            "2",
            "--out",
            str(out),
            "--json",
            "--no-load-check",
        ]
    )
    capsys.readouterr()
    assert (
        main(["eval", "--model", str(out), "--perplexity", "wikitext2", "--max-tokens", "256", "--card", "--json"]) == 0
    )
    full = json.loads(capsys.readouterr().out)
    card = ModelCard.load(out / "README.md")
    values = {r.metric_name: r.metric_value for r in card.data.eval_results}
    assert values == {
        "wikitext2 ppl (base model)": full["base"]["perplexity"]["wikitext2"]["ppl"],
        "wikitext2 ppl (tiny-llama-nbl-attn-k2)": full["perplexity"]["wikitext2"]["ppl"],
    }
    assert "| wikitext2 perplexity ↓ |" in card.text and "Not evaluated here" not in card.text
    tokens = full["perplexity"]["wikitext2"]["tokens"]  # 256 of WikiText-2's: the card and model-index say so
    assert f"**Truncated evaluation**, scored on a sample: wikitext2 perplexity on {tokens:,} of " in card.text
    assert {r.dataset_args["tokens"] for r in card.data.eval_results} == {tokens}
    assert main(["eval", "--model", str(tiny_dir), "--card"]) == 2  # not a compressed output: refused


def test_card_command_of_a_k_auto_run_gives_the_budget_and_the_selection_data():
    from worker.publish.card_recipe import recipe_section

    report = {
        "base_model": "m",
        "recipe": {
            "dataset": {"path": "c4", "split": "train"},
            "num_samples": 8,
            "criterion": "auto",
            "k": 5,
            "max_ppl_increase": 0.1,
        },
        "selection": {
            "data": {
                "source": "selection dataset",
                "path": "wikitext2",
                "config": None,
                "split": "validation",
                "text_field": "text",
                "num_samples": 16,
            }
        },
    }
    text = recipe_section(report, None)
    assert "--k auto --max-ppl-increase 0.1" in text and "--k 5" not in text
    assert "--selection-dataset wikitext2" in text and "--selection-samples 16" in text
    assert "--selection-split" not in text  # validation is the default
    held = {
        **report,
        "recipe": {**report["recipe"], "max_ppl_increase": None},
        "selection": {"data": {"source": "calibration held-out", "num_samples": 1}},
    }
    assert "--k 5" in recipe_section(held, None) and "--selection" not in recipe_section(held, None)
