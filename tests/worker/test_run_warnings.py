"""The run's warnings (worker/run_warnings.py) and the truncated evaluation (worker/eval/truncation.py), pure:
held-out NMSE above 1 on a replaced layer, fewer than 10·d calibration tokens, an evaluation cut short by
max_tokens or limit; and the card and model-index that say them. `nbl compress --gate`'s parsing."""

from __future__ import annotations

import argparse
from types import SimpleNamespace

import pytest
from huggingface_hub import ModelCard

from cli.gates import gates_from_args, parse_gate
from nbl.recipe import Gates
from worker import run_warnings as W
from worker.eval.evaluate import EvalSpec
from worker.eval.truncation import describe, scored
from worker.publish.card import CardInfo, card_text

SCORES = [{"layer": i, "attn": {"heldout_nmse": v}} for i, v in enumerate([0.2, 1.7, 0.9, None, 3.0])]


def test_held_out_nmse_above_one_on_a_replaced_layer_warns_for_that_output_only():
    found = W.overfit(SCORES, "attn", {1: [0], 2: [0, 1], 3: [1, 3, 4]})
    assert set(found) == {2, 3}
    assert "layer 1 (1.7)" in found[2] and "layers 1 (1.7), 4 (3)" in found[3] and "more tokens" in found[3]
    assert W.overfit(SCORES, "block", {2: [1]}) == {}  # no block scores: nothing to say


def test_fewer_than_ten_tokens_per_hidden_dimension_warn():
    assert W.few_tokens(5_759, 576) is not None and "5,760" in W.few_tokens(5_759, 576)
    assert W.few_tokens(5_760, 576) is None and W.few_tokens(None, 576) is None and W.few_tokens(100, None) is None
    w = W.after_compression(SCORES, "attn", {1: [0], 2: [1]}, 320, 64)
    assert w.for_k(1) == w.common and len(w.common) == 1 and w.for_k(2)[0].startswith("k=2: held-out NMSE")


METRICS = {
    "base": {
        "perplexity/wikitext2/ppl": 20.0,
        "perplexity/wikitext2/tokens": 4094.0,
        "perplexity/wikitext2/corpus_tokens": 287_645.0,
        "perplexity/c4/tokens": 900.0,
        "tasks/arc_easy/acc": 0.6,
        "tasks/arc_easy/n": 500.0,
        "tasks/boolq/n": 40.0,
    },
    "k4": {
        "perplexity/wikitext2/ppl": 21.0,
        "perplexity/wikitext2/tokens": 4094.0,
        "perplexity/wikitext2/corpus_tokens": 287_645.0,
        "perplexity/c4/tokens": 900.0,
        "tasks/arc_easy/acc": 0.58,
        "tasks/arc_easy/n": 500.0,
        "tasks/boolq/n": 40.0,
    },
}


def test_an_evaluation_cut_short_says_how_much_it_scored():
    cut = scored(METRICS, limit=500, max_tokens=4096)
    # c4 was scored whole (no corpus_tokens); boolq has fewer documents than the limit
    assert cut == {
        "perplexity/wikitext2": {"tokens": 4094, "corpus_tokens": 287_645, "max_tokens": 4096},
        "tasks/arc_easy": {"documents": 500, "limit": 500},
    }
    assert (
        describe("perplexity/wikitext2", cut["perplexity/wikitext2"])
        == "wikitext2 perplexity on 4,094 of 287,645 tokens (max_tokens 4,096)"
    )
    assert scored(METRICS, None, None) == {}
    w = W.RunWarnings()
    (msg,) = W.after_evaluation(w, METRICS, 500, 4096)
    assert msg.startswith("evaluation truncated") and "arc_easy on 500 documents (limit 500)" in msg
    assert w.common == [msg] and w.scored == cut
    assert W.after_evaluation(W.RunWarnings(), METRICS, None, None) == []


def test_the_card_lists_the_warnings_and_its_model_index_the_scored_sample(tmp_path):
    report = {"base_model": "m", "replaced_layers": [1], "recipe": {"mode": "attn", "k": 1}, "layers": SCORES}
    cut = scored(METRICS, 500, 4096)
    warning = W.truncated(cut)
    path = tmp_path / "README.md"
    path.write_text(
        card_text(
            CardInfo(
                report=report,
                metrics={"base": METRICS["base"], "compressed": METRICS["k4"]},
                warnings=["k=1: held-out NMSE above 1", warning],
                scored=cut,
                plot=None,
            )
        )
    )
    card = ModelCard.load(path)
    assert "## Warnings\n\n- k=1: held-out NMSE above 1\n- evaluation truncated" in card.text
    assert "**Truncated evaluation**, scored on a sample: wikitext2 perplexity on 4,094 of 287,645 tokens" in card.text
    args = {r.metric_name: r.dataset_args for r in card.data.eval_results}
    assert args["wikitext2 ppl (base model)"] == {"tokens": 4094, "corpus_tokens": 287_645, "max_tokens": 4096}
    assert args["arc_easy acc (base model)"] == {"documents": 500, "limit": 500}
    whole = card_text(CardInfo(report=report, metrics={"base": METRICS["base"]}, plot=None))
    assert "## Warnings" not in whole and "Truncated" not in whole and "args:" not in whole


@pytest.mark.parametrize(
    "text, parsed",
    [
        ("wikitext2:ppl:+10%", ("max_ppl_increase", "wikitext2", 0.10)),
        ("wikitext2:ppl:+1000%", ("max_ppl_increase", "wikitext2", 10.0)),  # said with %: meant
        ("arc_easy:acc:-0.02", ("max_acc_drop", "arc_easy", 0.02)),
        ("arc_easy:acc:-2%", ("max_acc_drop", "arc_easy", 0.02)),
    ],
)
def test_gate_flags_parse(text, parsed):
    kind, name, value = parse_gate(text)
    assert (kind, name) == parsed[:2] and value == pytest.approx(parsed[2])


@pytest.mark.parametrize(
    "text",
    [
        "wikitext2:ppl:-10%",
        "arc_easy:acc:+0.02",
        "wikitext2:loss:+1",
        "wikitext2:+10%",
        "arc_easy:acc:-150%",
        "../x:ppl:+1",
        "wikitext2:ppl:0.1",
        "arc_easy:acc:-1",
    ],
)
def test_bad_gate_flags_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_gate(text)


def test_gate_flags_must_name_what_eval_measures():
    espec = EvalSpec(perplexity=("wikitext2",), tasks=("arc_easy",))
    args = SimpleNamespace(gate=[parse_gate("wikitext2:ppl:+10%"), parse_gate("arc_easy:acc:-0.02")])
    assert gates_from_args(args, espec) == Gates({"wikitext2": pytest.approx(0.1)}, {"arc_easy": 0.02})
    assert gates_from_args(SimpleNamespace(gate=[]), espec) is None
    with pytest.raises(ValueError, match="give --eval"):
        gates_from_args(args, None)
    with pytest.raises(ValueError, match="the corpus 'c4' is not measured; add it to --perplexity"):
        gates_from_args(SimpleNamespace(gate=[parse_gate("c4:ppl:+5%")]), espec)
    with pytest.raises(ValueError, match="two max_acc_drop gates on arc_easy"):
        gates_from_args(SimpleNamespace(gate=[parse_gate("arc_easy:acc:-0.02")] * 2), espec)


def test_the_hidden_size_comes_from_the_config_when_the_weights_are_not_loaded(tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps({"text_config": {"hidden_size": 576}}))
    assert W.hidden_size(SimpleNamespace(model=None, path=tmp_path)) == 576
    assert (
        W.hidden_size(SimpleNamespace(model=SimpleNamespace(config=SimpleNamespace(hidden_size=64)), path=None)) == 64
    )
    assert W.hidden_size(SimpleNamespace(model=None, path=tmp_path / "missing")) is None
