"""`nbl eval --suite paper`: the paper's tasks whose data is here, the ones skipped, and the average."""

import argparse
import json

import pytest
from eval_helpers import hf_cache_with_winogrande, winogrande_rows
from testkit.models import save_tiny_checkpoint

from cli.eval import add_eval
from worker.eval.benchmarks.suite import SUITES, summary

pytestmark = pytest.mark.usefixtures("one_thread")
OFFLINE = {"mmlu", "arc_easy", "arc_challenge", "boolq", "hellaswag", "openbookqa"}  # shipped under NBL_DATA_DIR


def test_summary_averages_the_metric_the_paper_reports_per_task():
    tasks = {t: {"acc": 0.1 * (i + 1), "acc_norm": 0.05 * (i + 1)} for i, (t, _) in enumerate(SUITES["paper"])}
    tasks["boolq"]["acc_norm"] = None  # lm-eval reports acc only for BoolQ, MMLU, WinoGrande
    got = summary("paper", {t: tasks[t] for t in OFFLINE}, {"piqa": "absent", "winogrande": "absent"})
    chosen = {
        "mmlu": "acc",
        "arc_easy": "acc_norm",
        "arc_challenge": "acc_norm",
        "boolq": "acc",
        "hellaswag": "acc_norm",
        "openbookqa": "acc_norm",
    }
    assert got["scores"] == {t: {"metric": m, "value": tasks[t][m]} for t, m in chosen.items()}
    assert got["average"] == pytest.approx(sum(tasks[t][m] for t, m in chosen.items()) / 6)
    assert (got["tasks_run"], got["tasks_total"]) == (6, 8) and set(got["skipped"]) == {"piqa", "winogrande"}
    assert summary("paper", {}, {t: "absent" for t, _ in SUITES["paper"]})["average"] is None


def test_nbl_eval_suite_paper_runs_what_is_here_and_names_what_is_not(tmp_path, capsys, monkeypatch):
    import datasets.config

    hf_cache_with_winogrande(tmp_path / "hf", winogrande_rows(4))  # winogrande cached, piqa nowhere
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("NBL_HOME", str(tmp_path / "home"))
    model = save_tiny_checkpoint(tmp_path / "m")

    def nbl(*argv: str) -> str:
        parser = argparse.ArgumentParser(prog="nbl")
        add_eval(parser.add_subparsers(dest="command", required=True))
        args = parser.parse_args(
            ["eval", "--model", str(model), "--base", "none", "--suite", "paper", "--limit", "2", *argv]
        )
        assert args.func(args) == 0
        return capsys.readouterr().out

    printed = nbl("--out", str(tmp_path / "report.json"))  # the table on stdout, the JSON in the file
    assert "paper average (7/8 tasks)" in printed and "skipped (data absent): piqa" in printed
    rep = json.loads((tmp_path / "report.json").read_text())
    suite = rep["suite"]
    assert set(rep["tasks"]) == OFFLINE | {"winogrande"} and rep["tasks"]["winogrande"]["n"] == 2
    assert rep["tasks"]["winogrande"]["acc_norm"] is None and rep["tasks"]["mmlu"]["n"] == 2 * 57  # per subject
    assert list(suite["skipped"]) == ["piqa"] and "data absent" in suite["skipped"]["piqa"]
    assert (suite["tasks_run"], suite["tasks_total"]) == (7, 8)
    by_hand = [rep["tasks"][t][m] for t, m in SUITES["paper"] if t != "piqa"]
    assert suite["average"] == pytest.approx(sum(by_hand) / 7)
    assert suite["scores"]["hellaswag"]["metric"] == "acc_norm" and suite["scores"]["winogrande"]["metric"] == "acc"


def test_a_task_file_may_not_shadow_a_suite_task(tmp_path):
    f = tmp_path / "boolq.jsonl"
    f.write_text('{"context": "a", "choices": ["b", "c"], "label": 0}\n')
    parser = argparse.ArgumentParser(prog="nbl")
    add_eval(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["eval", "--model", "x", "--suite", "paper", "--task-file", str(f)])
    with pytest.raises(ValueError, match="boolq"):
        args.func(args)


def test_a_suite_with_no_data_here_is_an_error_not_an_empty_average(tmp_path, monkeypatch):
    import datasets.config

    monkeypatch.delenv("NBL_DATA_DIR")  # every name goes to lm-eval, whose cache is empty
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "empty-hf-cache"))
    monkeypatch.setenv("NBL_HOME", str(tmp_path / "home"))
    parser = argparse.ArgumentParser(prog="nbl")
    add_eval(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(
        ["eval", "--model", str(save_tiny_checkpoint(tmp_path / "m")), "--base", "none", "--suite", "paper"]
    )
    with pytest.raises(ValueError, match="no task has its data here.*NBL_DATA_DIR"):
        args.func(args)


def test_the_base_cache_key_changes_when_winogrande_arrives_in_the_data_directory(tmp_path):
    from worker.eval.benchmarks.local_data import OPTIONAL
    from worker.eval.evaluate import EvalSpec, cache_key

    spec = EvalSpec(suite="paper")
    before = cache_key("fp", spec, "float32", "cpu", tmp_path)  # a cached base would skip winogrande
    assert cache_key("fp", spec, "float32", "cpu", tmp_path) == before
    path = tmp_path / OPTIONAL["winogrande"]
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(winogrande_rows(1)[0]) + "\n")
    assert cache_key("fp", spec, "float32", "cpu", tmp_path) != before
