"""The estimate counts the vocabulary (issue 37, item 6): the head's weights and one chunk of its logits
(nbl/sizing/head.py), never a whole batch's, and measured selection's prefix cache."""

from __future__ import annotations

import pytest

from nbl.selection.sets import PREFIX_CACHE_BYTES, expected_sets
from nbl.sizing.head import head_chunk_bytes
from nbl.sizing.model import estimate
from nbl.sizing.options import Options
from nbl.sizing.shapes import shape_of

QWEN_05B = {  # Qwen2.5-0.5B's shape, untied: the greedy that was killed at 22.3 GB
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
}
GREEDY = Options(num_samples=32, seq_len=256, criterion="greedy", ks=(6,), selection_samples=16, outputs=False)


def host(vocab: int, opts: Options, phase: str) -> int:
    return estimate(shape_of({**QWEN_05B, "vocab_size": vocab}), opts, ["cpu"]).phases[phase]["host"]


@pytest.mark.parametrize(
    "opts,phase",
    [
        (GREEDY, "select"),
        (Options(num_samples=32, seq_len=256, criterion="loss", outputs=False, whole_model=False), "calibrate"),
        (Options(num_samples=32, seq_len=256, outputs=False, perplexity=("wikitext2",)), "evaluate"),
    ],
)
def test_host_memory_grows_with_the_vocabulary_by_its_weights_and_one_chunk(opts, phase):
    small, qwen, gemma = (host(v, opts, phase) for v in (49152, 151936, 262144))
    assert small < qwen < gemma
    weights = 2 * (262144 - 151936) * 896 * 4  # untied: the embedding and the head (the probe's, after the stem)
    chunk = head_chunk_bytes(262144, 4) - head_chunk_bytes(151936, 4)
    assert gemma - qwen == weights + chunk  # no tokens x vocab term: before, 2,048 tokens' logits, 2.7 GB more


def test_selection_counts_its_cached_states_and_a_chunk_of_logits():
    shape, dt = shape_of(QWEN_05B), 4
    entry = 16 * 256 * 896 * dt  # the selection blocks' hidden states
    sets = expected_sets("greedy", (6,), 24)
    select = estimate(shape, GREEDY, ["cpu"]).phases["select"]["host"]
    cached = min(24, sets) * entry + min(PREFIX_CACHE_BYTES, sets * entry)  # base entries and prefixed ones
    assert select >= shape.params * dt + cached + head_chunk_bytes(shape.vocab, dt)
    assert select < shape.params * dt + cached + 2 * 10**9  # the rest: the runtime and one batch's transients
    deeper = estimate(shape, Options(**{**GREEDY.__dict__, "ks": (12,)}), ["cpu"]).phases["select"]["host"]
    assert deeper > select  # more sets, more prefixed states


def test_tasks_still_count_a_batch_of_whole_logits():
    # the tasks' scoring (eval/loglikelihood.py) takes a batch's logits whole; perplexity a chunk at a time
    ppl = Options(num_samples=32, seq_len=256, outputs=False, perplexity=("wikitext2",))
    tasks = Options(num_samples=32, seq_len=256, outputs=False, tasks=("arc_easy",))
    assert host(151936, tasks, "evaluate") - host(151936, ppl, "evaluate") > 2048 * 151936 * 8
