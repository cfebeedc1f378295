"""`nbl eval` end to end on tiny models: the JSON shape, base vs compressed deltas, the base cache."""

import argparse
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from testkit.models import save_tiny_checkpoint, tiny_model, tiny_tokenizer

from cli.eval import add_eval
from worker.engine.forms import surgery
from worker.engine.forms.saving import save_compressed
from worker.engine.loading.load import load_model
from worker.eval import evaluate as evaluate_mod
from worker.eval.evaluate import EvalSpec, cache_key, evaluate_cached
from worker.eval.report import delta, rows

pytestmark = pytest.mark.usefixtures("one_thread")


def nbl(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="nbl")
    add_eval(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["eval", *argv])
    return args.func(args)


@pytest.fixture
def models(tmp_path):
    base = save_tiny_checkpoint(tmp_path / "base")
    model = tiny_model()
    surgery.apply(model, surgery.Plan("attn", "drop", (1, 2)))
    report = {"base_model": str(base), "base_fingerprint": load_model(str(base)).fingerprint}
    out = save_compressed(model, tiny_tokenizer(), tmp_path / "out", "llama", report)
    quiz = tmp_path / "quiz.jsonl"
    quiz.write_text(
        "".join(
            json.dumps({"context": f"Q{i}: ", "choices": ["yes", "no", "maybe"], "label": i % 3}) + "\n"
            for i in range(6)
        )
    )
    text = tmp_path / "corpus.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    return base, out, quiz, text


def test_json_report_base_vs_compressed(models, capsys, monkeypatch):
    base, out, quiz, text = models
    calls = []
    real = evaluate_mod.evaluate_model
    monkeypatch.setattr(
        evaluate_mod, "evaluate_model", lambda lm, *a, **k: calls.append(lm.source) or real(lm, *a, **k)
    )
    argv = [
        "--model",
        str(out),
        "--perplexity",
        str(text),
        "--task-file",
        str(quiz),
        "--tasks",
        "arc_easy",
        "--limit",
        "3",
        "--json",
    ]
    assert nbl(argv) == 0
    rep = json.loads(capsys.readouterr().out)  # stdout holds the JSON and nothing else
    assert set(rep["tasks"]) == {"arc_easy", "quiz"} and rep["tasks"]["arc_easy"]["n"] == 3
    assert (
        set(rep["tasks"]["quiz"]) == {"acc", "acc_norm", "n", "ppl"} and rep["tasks"]["quiz"]["n"] == 3
    )  # --limit too
    assert set(rep["perplexity"][str(text)]) == {"ppl", "bits_per_byte", "tokens"} and rep["speed"] is None
    assert rep["base"]["model"]["source"] == str(base) and rep["base"]["cached"] is False  # recorded base found
    quiz_acc = rep["tasks"]["quiz"]["acc"], rep["base"]["tasks"]["quiz"]["acc"]
    assert rep["delta"]["tasks"]["quiz"]["acc"] == pytest.approx(quiz_acc[0] - quiz_acc[1])
    assert rep["delta"]["perplexity"][str(text)]["ppl"] == pytest.approx(
        rep["perplexity"][str(text)]["ppl"] - rep["base"]["perplexity"][str(text)]["ppl"]
    )
    assert calls == [str(base), str(out)]

    # the same base evaluation again: read from the cache, the base is not evaluated
    calls.clear()
    assert nbl(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["base"]["cached"] is True and calls == [str(out)]
    assert again["base"]["tasks"] == rep["base"]["tasks"] and again["tasks"] == rep["tasks"]
    # another limit is another evaluation
    calls.clear()
    assert nbl([a if a != "3" else "2" for a in argv]) == 0
    assert json.loads(capsys.readouterr().out)["base"]["cached"] is False and calls == [str(base), str(out)]


def test_speed_report_base_vs_compressed(models, capsys):
    out = models[1]
    assert nbl(["--model", str(out), "--speed", "--repeats", "1", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["tasks"] == {} and rep["perplexity"] == {}
    assert rep["speed"]["kv_cache_layers"] == 2 and rep["base"]["speed"]["kv_cache_layers"] == 4
    assert rep["speed"]["kv_cache_bytes_per_token"] == rep["base"]["speed"]["kv_cache_bytes_per_token"] / 2
    removed = rep["base"]["params"]["non_embedding_params"] - rep["params"]["non_embedding_params"]
    base_ne = rep["base"]["params"]["non_embedding_params"]
    assert removed > 0 and rep["speed"]["sparsity"] == pytest.approx(removed / base_ne)
    assert rep["base"]["speed"]["sparsity"] == 0.0


def test_printed_table_and_no_base(models, capsys):
    base, out, quiz, _ = models
    assert nbl(["--model", str(out), "--base", "none", "--task-file", str(quiz)]) == 0
    printed = capsys.readouterr().out
    assert "quiz acc (n=6)" in printed and "delta" not in printed
    assert nbl(["--model", str(out), "--base", str(base), "--task-file", str(quiz)]) == 0
    printed = capsys.readouterr().out
    assert "delta" in printed and "quiz acc_norm (n=6)" in printed


def test_cache_key_tracks_what_changes_the_numbers(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"context": "a", "choices": ["b", "c"], "label": 0}\n')
    spec = EvalSpec(tasks=("arc_easy",), task_files=(str(f),), limit=5)
    key = cache_key("dir:abc", spec, "float32", "cpu")
    assert key == cache_key("dir:abc", replace(spec, batch_tokens=1), "float32", "cpu")  # batching only
    assert key != cache_key("dir:abd", spec, "float32", "cpu")
    assert key != cache_key("dir:abc", replace(spec, limit=6), "float32", "cpu")
    assert key != cache_key("dir:abc", replace(spec, tasks=("arc_easy", "boolq")), "float32", "cpu")
    assert key != cache_key("dir:abc", replace(spec, speed=True), "float32", "cpu")
    assert key != cache_key("dir:abc", replace(spec, suite="paper"), "float32", "cpu")
    assert key != cache_key("dir:abc", spec, "bfloat16", "cpu")
    assert key != cache_key("dir:abc", spec, "float32", "cpu", data_dir=tmp_path / "data")  # other shipped files
    f.write_text('{"context": "a", "choices": ["b", "c"], "label": 1}\n')
    assert key != cache_key("dir:abc", spec, "float32", "cpu")


def test_cache_key_names_the_tokenizers_prefix_only_when_there_is_one():
    """Windows open with the tokenizer's prefix (perplexity.py): a Gemma base evaluated before they did is not
    read back; a tokenizer adding nothing keeps the key it had."""
    spec = EvalSpec(perplexity=("wikitext2",), max_tokens=4096)
    key = cache_key("dir:abc", spec, "float32", "cpu")
    assert cache_key("dir:abc", spec, "float32", "cpu", prefix=()) == key
    assert cache_key("dir:abc", spec, "float32", "cpu", prefix=(2,)) != key


def test_delta_and_table_rows():
    def result(acc, ppl, tps):
        return {
            "perplexity": {"w": {"ppl": ppl, "bits_per_byte": 1.0, "tokens": 10}},
            "tasks": {"t": {"acc": acc, "acc_norm": None, "n": 4}},
            "speed": {
                "prefill_tokens_per_s": {"512": tps},
                "decode_tokens_per_s": tps,
                "decode_context": 512,
                "new_tokens": 128,
                "kv_cache_bytes_per_token": 100.0,
                "non_embedding_params": 10,
                "sparsity": None,
            },
            "params": {"non_embedding_params": 10},
            "model": {"source": "m"},
        }

    d = delta(result(0.5, 12.0, 300.0), result(0.75, 10.0, 200.0))
    assert d["tasks"]["t"] == {"acc": -0.25, "acc_norm": None, "n": 0, "ppl": None}  # ppl: LAMBADA-style tasks
    assert d["perplexity"]["w"]["ppl"] == 2.0 and d["speed"]["decode_tokens_per_s"] == 100.0
    table = {r[0]: r for r in rows(result(0.5, 12.0, 300.0), result(0.75, 10.0, 200.0))}
    assert table["t acc (n=4)"][3] == "-0.2500" and table["prefill tok/s @512"][3] == "x1.50"


def test_evaluate_cached_skips_a_cached_base(tmp_path):
    lm = load_model(str(save_tiny_checkpoint(tmp_path / "m")))
    quiz = tmp_path / "q.jsonl"
    quiz.write_text('{"context": "a", "choices": ["b", "c"], "label": 0}\n')
    spec = EvalSpec(task_files=(str(quiz),))
    home = tmp_path / "home"  # the cache lives under the caller's NBL_HOME (Settings.home)
    first = evaluate_cached(lm, spec, home=home)
    calls = []
    lm.model.register_forward_hook(lambda *a: calls.append(1))
    second = evaluate_cached(lm, spec, home=home)
    assert first["cached"] is False and second["cached"] is True and not calls
    assert second["tasks"] == first["tasks"] and len(list((home / "evals").glob("*.json"))) == 1
    third = evaluate_cached(lm, spec, use_cache=False, home=home)
    assert third["cached"] is False and calls
    calls.clear()
    assert evaluate_cached(lm, spec)["cached"] is False and calls  # no home: no cache


def test_a_cached_base_is_looked_up_before_its_weights_are_loaded(tmp_path):
    """compare.py hands a base whose weights were released (lm.model None): the cache is asked where they
    would be loaded, and the weights are read only on a miss; the key is the loaded model's."""
    from worker.engine.loading.load import load_weights, release_weights

    lm = load_model(str(save_tiny_checkpoint(tmp_path / "m")), weights=False)
    spec, home, loads = EvalSpec(perplexity=("wikitext2",), max_tokens=64), tmp_path / "home", []

    def load():
        loads.append(1)
        load_weights(lm)

    data = Path(os.environ["NBL_DATA_DIR"])
    first = evaluate_cached(lm, spec, home=home, load=load, devices=["cpu"], data_dir=data)
    assert first["cached"] is False and loads == [1]
    assert (home / "evals" / f"{cache_key(lm.fingerprint, spec, 'float32', 'cpu', data)}.json").is_file()
    release_weights(lm)
    second = evaluate_cached(lm, spec, home=home, load=load, devices=["cpu"], data_dir=data)
    assert second["cached"] is True and loads == [1] and lm.model is None  # never read from disk
    assert second["perplexity"] == first["perplexity"]
