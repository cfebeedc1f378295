"""Issue 35, finding 7: heal.tokens past what the calibration data holds was found by the worker after calibrating.
The API refuses it at submit when it knows the most the data can give (a shipped copy under NBL_DATA_DIR:
nbl/data/shipped.py), naming compression.heal.tokens; the worker's own check comes before it calibrates
(tests/worker/engine/refine/test_refine_stage.py). One count of the blocks needed: nbl/data/heal.py."""

from __future__ import annotations

import pytest
from testkit.model_configs import TINY, write_config
from testkit.models import DATA_DIR
from testkit.service_lib import assert_problem

from nbl.data.heal import stream_blocks
from nbl.data.shipped import most_tokens

C4_MOST = 741_230  # c4_demo.json's texts: their UTF-8 bytes + 2 a text


@pytest.fixture
def db_url(sqlite_clean_url):
    return sqlite_clean_url


def job(tokens: int, dataset: str = "c4") -> dict:
    return {
        "model": {"id": "local:tiny"},
        "calibration": {"dataset": dataset, "num_samples": 8, "seq_len": 32},
        "compression": {"k": 1, "heal": {"tokens": tokens}},
    }


def test_the_bound_of_the_shipped_c4():
    assert most_tokens(DATA_DIR, "c4", "train", "text") == C4_MOST
    assert most_tokens(DATA_DIR, "C4", "train", "text") == C4_MOST  # the worker matches the name lower-cased
    assert most_tokens(None, "c4", "train", "text") is None  # no NBL_DATA_DIR: the worker reads the Hub's
    assert most_tokens(DATA_DIR, "org/data", "train", "text") is None
    assert most_tokens(DATA_DIR, "c4", "test", "text") is None  # a split the copy lacks: the worker says so


def test_a_heal_the_shipped_data_cannot_hold_is_a_422_at_submit(settings, client, auth):
    assert settings.data_dir == DATA_DIR
    write_config(settings.models_dir / "tiny", TINY)
    over = 10**6  # 8 + 31,250 blocks of 32 tokens; the copy gives at most 23,163
    assert stream_blocks(8, 32, over) > C4_MOST // 32 >= stream_blocks(8, 32, 700_000)
    for path in ("/v1/jobs", "/v1/estimates"):
        p = assert_problem(client.post(path, json=job(over), headers=auth), 422, "validation-error")
        e = p["errors"][0]
        assert e["loc"] == ["body", "compression", "heal", "tokens"] and e["input"] == over, p
        assert "it gives at most 741,230 tokens, 23,163 blocks" in e["msg"] and "8 + 31,250 blocks" in e["msg"], p
    assert client.post("/v1/jobs", json=job(700_000), headers=auth).status_code == 201
    # a Hub dataset's size is not known here: the worker checks it before calibrating
    assert client.post("/v1/jobs", json=job(over, "org/data"), headers=auth).status_code == 201


def test_the_bound_holds_a_token_a_byte():
    """The worst tokenizer the bound allows for: byte-level BPE without merges, a token for each byte of each text,
    and the worker's EOS after each. Its stream over the shipped c4 falls one token a text under the bound."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from worker.engine.calibration.data import DatasetSpec, load_texts

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok)
    texts = list(load_texts(DatasetSpec("c4"), DATA_DIR))
    stream = sum(len(fast(t, add_special_tokens=False)["input_ids"]) + 1 for t in texts)
    assert stream == C4_MOST - len(texts)
