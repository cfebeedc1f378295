"""The real SmolLM2-135M: our scores equal lm-eval's own on ARC-Easy, and the speed figures read the
real KV cache. Slow (the GGUF is converted once per session), so marked."""

import pytest
from eval_helpers import DATA_DIR
from testkit.models import load_smollm2

from worker.eval.lmeval_parity import compare_scores
from worker.eval.speed import measure_speed

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def smollm2(smollm2_home):
    return load_smollm2(smollm2_home)  # the GGUF is converted once per session


def test_smollm2_arc_easy_equals_lm_eval(smollm2):
    pytest.importorskip("lm_eval")
    got = compare_scores(smollm2.model, smollm2.tokenizer, "arc_easy", limit=20, root=DATA_DIR, batch_size=8)
    print("\nSmolLM2-135M ARC-Easy, first 20:", got)
    assert got["lm_eval"] == got["ours"] and got["max_abs_ll_diff"] < 1e-3, got


def test_smollm2_speed_reads_the_kv_cache(smollm2):
    cfg = smollm2.model.config
    speed = measure_speed(smollm2.model, lengths=(64,), new_tokens=8, decode_context=32, repeats=1, warmup=0)
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    assert speed["kv_cache_bytes_per_token"] == 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * 4
    assert speed["kv_cache_layers"] == cfg.num_hidden_layers and speed["sparsity"] is None
