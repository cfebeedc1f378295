"""Small real models with log-likelihoods one can compute by hand, and a small real BPE tokenizer."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

DATA_DIR = Path(os.environ["NBL_DATA_DIR"])  # set by testkit.models (tests/conftest.py imports it)


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
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")


PEOPLE = [
    ("Sarah", "Maria"),
    ("the trophy", "the suitcase"),
    ("Jim", "Kevin"),
    ("the cat", "the dog"),
    ("Anna", "Beth"),
    ("the river", "the lake"),
    ("Tom", "Carl"),
    ("the pen", "the pencil"),
]
ENDINGS = [
    " always got the harder cases.",
    " was too small.",
    " won the energy prize.",
    " from the Sun is warm.",
    " could not answer the question.",
    "'s water froze first.",
    " is more than it seems.",
    " rolled away.",
]


def winogrande_rows(n: int = 8) -> list[dict]:
    """WinoGrande-schema records (sentence with a blank, two options, answer "1"/"2"), made up here."""
    return [
        {
            "sentence": f"{a} was faster than {b}, so _{ENDINGS[i % len(ENDINGS)]}",
            "option1": a,
            "option2": b,
            "answer": str(1 + i % 2),
        }
        for i, (a, b) in enumerate(PEOPLE[:n])
    ]


def hf_cache_with_winogrande(root, rows: list[dict]) -> None:
    """`rows` as the Hugging Face cache holds allenai/winogrande (winogrande_xl) after a download, so
    `datasets` reads it offline through its own cached-dataset path."""
    from datasets import DatasetInfo, Features, SplitDict, SplitInfo, Value
    from datasets.arrow_writer import ArrowWriter

    features = Features({k: Value("string") for k in rows[0]})
    folder = root / "allenai___winogrande" / "winogrande_xl" / "0.0.0" / "0123abcd"
    folder.mkdir(parents=True)
    splits = SplitDict()
    for split in ("train", "validation"):
        with ArrowWriter(features=features, path=str(folder / f"winogrande-{split}.arrow")) as w:
            for r in rows:
                w.write(r)
            n, nbytes = w.finalize()
        splits.add(SplitInfo(name=split, num_bytes=nbytes, num_examples=n, dataset_name="winogrande"))
    DatasetInfo(
        features=features, config_name="winogrande_xl", dataset_name="winogrande", splits=splits
    ).write_to_directory(str(folder))
