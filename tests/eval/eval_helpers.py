"""Small real models with log-likelihoods one can compute by hand, and a small real BPE tokenizer."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch import nn

DATA_DIR = Path(os.environ["NBL_DATA_DIR"])  # set by tests/conftest.py


class BigramLM(nn.Module):
    """logits at position t depend only on token t: log p(next = j | current = i) = table[i, j].

    So ll(continuation | context) = Σ table[prev, cur] along the continuation, which a test can add up
    itself. It is a plain module with a `config` and a `.logits` output, like a transformers model.
    """

    def __init__(self, table: torch.Tensor, window: int = 64):
        super().__init__()
        self.table = nn.Parameter(table.log_softmax(-1), requires_grad=False)  # (V, V) log-probs
        self.config = SimpleNamespace(max_position_embeddings=window, vocab_size=table.shape[0])
        self.calls = 0

    def forward(self, input_ids, use_cache=False, **kw):
        self.calls += 1
        return SimpleNamespace(logits=self.table[input_ids])  # (B, T, V)

    def ll(self, ids: list[int], start: int) -> float:
        """Σ_{t >= start} log p(ids[t] | ids[t-1]), by hand."""
        return sum(float(self.table[ids[t - 1], ids[t]]) for t in range(start, len(ids)))


def bpe_tokenizer(vocab_size: int = 400):
    """A byte-level BPE trained on ARC questions in well under a second: boundary merges happen."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    lines = (DATA_DIR / "arc_easy" / "ARC-Easy-test.jsonl").read_text().splitlines()[:400]
    texts = [json.loads(x)["question"] for x in lines]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")


@pytest.fixture
def one_thread():
    """Run a test's forwards on one CPU thread, then restore the count. On a loaded 2-core machine,
    many small forwards on 2 OpenMP threads can run 40x slower than on one (threads wait on each
    other); no test here asserts a timing, this only keeps the suite quick."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
