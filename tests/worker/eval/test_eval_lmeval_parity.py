"""Our tasks against lm-evaluation-harness itself, on the shipped files: same prompts, same numbers.

lm-eval's own task configs are pointed at the local data (worker/eval/lmeval_parity.py), so every
(context, continuation, label) it builds can be compared with ours, and its end-to-end evaluation
(HFLM) with our scorer on a tiny random Llama with a real BPE tokenizer.
"""

import pytest
import torch
from eval_helpers import DATA_DIR, bpe_tokenizer, hf_cache_with_winogrande, winogrande_rows

from worker.eval.benchmarks.registry import load_task
from worker.eval.lmeval_parity import compare_prompts, compare_scores  # lm_eval is imported lazily
from worker.eval.token_split import encode_pair

pytest.importorskip("lm_eval")
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize(
    "name, limit",
    [
        ("arc_easy", 300),
        ("arc_challenge", 100),
        ("hellaswag", 300),
        ("boolq", 300),
        ("openbookqa", 100),
        ("lambada_openai", 300),
        ("mmlu", 2),
    ],
)
def test_prompts_equal_lm_evals(name, limit):
    assert compare_prompts(name, DATA_DIR, limit) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["arc_easy", "arc_challenge", "hellaswag", "boolq", "openbookqa", "lambada_openai", "mmlu"]
)
def test_prompts_equal_lm_evals_on_every_document(name):
    assert compare_prompts(name, DATA_DIR) == []  # mmlu: 14,042 five-shot prompts, a few minutes


@pytest.fixture(scope="module")
def tiny_bpe_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = bpe_tokenizer()
    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=len(tok),
        max_position_embeddings=1024,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    return LlamaForCausalLM(cfg).eval(), tok


def test_token_split_equals_lm_evals(tiny_bpe_llama):
    from lm_eval.models.huggingface import HFLM

    model, tok = tiny_bpe_llama
    lm = HFLM(pretrained=model, tokenizer=tok, batch_size=1)
    pairs = [
        ("Question: Which gas do plants use?\nAnswer:", " carbon dioxide"),
        ("What is the", "rmal energy"),
        ("Answer: ", " yes"),
        ("tabs\t", "\tand spaces"),
        ("energy", " from the Sun"),
    ]
    for c, k in pairs:
        assert encode_pair(tok, c, k) == tuple(map(list, lm._encode_pair(c, k)))


@pytest.mark.parametrize(
    "name, limit", [("arc_easy", 40), ("hellaswag", 12), ("boolq", 12), ("lambada_openai", 12), ("mmlu", 1)]
)
def test_scores_equal_lm_evals(tiny_bpe_llama, name, limit):
    model, tok = tiny_bpe_llama
    got = compare_scores(model, tok, name, limit, DATA_DIR, batch_size=4)
    assert got["lm_eval"] == got["ours"], got
    assert got["max_abs_ll_diff"] is not None and got["max_abs_ll_diff"] < 1e-4, got


def test_unknown_names_and_offline_datasets_are_user_errors(monkeypatch):
    with pytest.raises(ValueError, match="unknown task"):
        load_task("no_such_task")
    # no data directory given: names go to lm-eval's own tasks, never to the network
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", "/nonexistent/hf-datasets-cache")
    with pytest.raises(ValueError, match="NBL_DATA_DIR"):
        load_task("openbookqa", limit=2)


# --- multiple inputs (WinoGrande): one continuation after each of several contexts ---------------
def test_winogrande_by_name_from_the_hf_cache_scores_as_lm_eval(tiny_bpe_llama, tmp_path, monkeypatch):
    import datasets.config

    from worker.eval.lmeval_parity import compare_lmeval_task_scores

    rows = winogrande_rows()
    hf_cache_with_winogrande(tmp_path, rows)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path))
    task = load_task("winogrande")  # not a shipped file: lm-eval's own task, offline, from the cache
    assert task.metrics == ("acc",) and len(task.docs) == len(rows)
    for d, r in zip(task.docs, rows):  # lm-eval's WinoGrande: the option fills the blank in the context
        head, tail = r["sentence"].split("_")
        assert d.pairs() == [(head + r["option1"], " " + tail.strip()), (head + r["option2"], " " + tail.strip())]
        assert d.label == int(r["answer"]) - 1

    model, tok = tiny_bpe_llama
    got = compare_lmeval_task_scores(model, tok, "winogrande", batch_size=4)
    assert got["requests"] == 2 * len(rows) and got["documents"] == len(rows)
    assert got["lm_eval"] == got["ours"] and got["ours"]["acc_norm"] is None, got
    assert got["max_abs_ll_diff"] is not None and got["max_abs_ll_diff"] < 1e-4, got


@pytest.mark.parametrize("form", ["contexts", "choices"])
def test_task_files_score_as_lm_eval(tiny_bpe_llama, tmp_path, form):
    import json

    from worker.eval.lmeval_parity import compare_task_file_scores

    records = []
    for r in winogrande_rows():
        head, tail = r["sentence"].split("_")
        if form == "contexts":  # the continuation as given, leading space included
            records.append(
                {
                    "contexts": [head + r["option1"], head + r["option2"]],
                    "continuation": tail,
                    "label": int(r["answer"]) - 1,
                }
            )
        else:
            records.append(
                {
                    "context": head.rstrip(),
                    "choices": [" " + r["option1"], " " + r["option2"]],
                    "label": int(r["answer"]) - 1,
                }
            )
    path = tmp_path / f"my_{form}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    model, tok = tiny_bpe_llama
    got = compare_task_file_scores(model, tok, path, batch_size=4)
    assert got["task"] == f"my_{form}" and got["requests"] == 2 * len(records)
    assert got["lm_eval"] == got["ours"], got
    assert (got["ours"]["acc_norm"] is None) == (form == "contexts")
    assert got["max_abs_ll_diff"] is not None and got["max_abs_ll_diff"] < 1e-4, got


# --- PIQA and WinoGrande from the data directory, when it holds them -----------------------------
def piqa_rows(n: int = 8) -> list[dict]:
    """baber/piqa-schema records (goal, two solutions, label 0/1), made up here."""
    return [
        {
            "goal": f"How do I keep {a} apart from {b}?",
            "sol1": f"Put {a} on the left.",
            "sol2": f"Put {b} in a box, then wait.",
            "label": i % 2,
        }
        for i, (a, b) in enumerate(
            [
                ("Sarah", "Maria"),
                ("the cup", "the pen"),
                ("the cat", "the dog"),
                ("a river", "a lake"),
                ("Tom", "Carl"),
                ("oil", "water"),
                ("salt", "sugar"),
                ("the keys", "the coins"),
            ][:n]
        )
    ]


@pytest.fixture
def optional_data_dir(tmp_path):
    import json

    from worker.eval.benchmarks.local_data import OPTIONAL

    for name, rows in (("winogrande", winogrande_rows()), ("piqa", piqa_rows())):
        path = tmp_path / OPTIONAL[name]
        path.parent.mkdir(parents=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path


@pytest.mark.parametrize("name", ["winogrande", "piqa"])
def test_piqa_and_winogrande_files_in_the_data_directory_score_as_lm_eval(
    tiny_bpe_llama, optional_data_dir, name, monkeypatch
):
    import datasets.config

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", "/nonexistent/hf-datasets-cache")
    task = load_task(name, data_dir=optional_data_dir)  # read from the file: the empty cache is never asked
    assert len(task.docs) == 8 and task.metrics == (("acc",) if name == "winogrande" else ("acc", "acc_norm"))
    assert compare_prompts(name, optional_data_dir) == []
    model, tok = tiny_bpe_llama
    got = compare_scores(model, tok, name, 8, optional_data_dir, batch_size=4)
    assert got["requests"] == 16 and got["lm_eval"] == got["ours"], got
    assert got["max_abs_ll_diff"] is not None and got["max_abs_ll_diff"] < 1e-4, got
    (optional_data_dir / "winogrande" / "winogrande_xl_validation.jsonl").unlink()
    (optional_data_dir / "piqa" / "validation.jsonl").unlink()
    with pytest.raises(ValueError, match=f"{name}: lm-eval's dataset is not in the local Hugging Face cache"):
        load_task(name, data_dir=optional_data_dir)  # no file: lm-eval's task, whose data is not cached either
