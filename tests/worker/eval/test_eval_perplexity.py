"""Perplexity windows: each opens with what the tokenizer puts before a text, which is never predicted;
a tokenizer that adds nothing is cut exactly as before."""

import math

import pytest
import torch
from testkit.models import tiny_model, tiny_tokenizer

from worker.engine.scoring.likelihood import nll_sum
from worker.eval.perplexity import perplexity

pytestmark = pytest.mark.usefixtures("one_thread")
TEXT = "The quick brown fox jumps over the lazy dog. " * 3  # 135 characters, one token each


def _by_hand(model, windows: list[list[int]], start: int) -> tuple[float, int]:
    nll, count = 0.0, 0
    for w in windows:
        s, c = nll_sum(model, torch.tensor([w]), start)
        nll, count = nll + s, count + c
    return nll, count


def test_every_window_opens_with_bos_and_every_text_token_is_scored():
    model, tok = tiny_model(vocab=128), tiny_tokenizer(bos=True)
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    got = perplexity(model, tok, TEXT, window=32, progress=False)
    windows = [[0, *ids[i : i + 31]] for i in range(0, len(ids), 31)]  # 4 of 32, then 11 tokens
    nll, count = _by_hand(model, windows, 1)
    assert count == len(ids) == got["tokens"] == 135
    assert got["ppl"] == pytest.approx(math.exp(nll / count), rel=1e-6)
    assert got["bits_per_byte"] == pytest.approx(nll / math.log(2) / len(TEXT.encode()), rel=1e-6)
    # max_tokens counts the text's tokens, the prefix aside
    cut = perplexity(model, tok, TEXT, window=32, max_tokens=62, progress=False)
    nll, count = _by_hand(model, windows[:2], 1)
    assert (cut["tokens"], cut["corpus_tokens"]) == (62, 135)
    assert cut["ppl"] == pytest.approx(math.exp(nll / count), rel=1e-6)
    assert cut["bits_per_byte"] == pytest.approx(nll / math.log(2) / 62, rel=1e-6)


def test_a_tokenizer_adding_nothing_is_cut_as_before():
    """The cut before windows kept a prefix: the tokenizer's encoding cut into windows of `window`, every token
    but each window's first predicted. Same tokens, same figures, bit for bit."""
    model, tok = tiny_model(vocab=128), tiny_tokenizer()
    ids = tok(TEXT)["input_ids"]
    nll, count = 0.0, 0
    for i in range(0, len(ids), 32):  # nll_sum as it was called then
        s, c = nll_sum(model, torch.tensor([ids[i : i + 32]]))
        nll, count = nll + s, count + c
    got = perplexity(model, tok, TEXT, window=32, progress=False)
    assert got == {
        "ppl": math.exp(nll / count),
        "bits_per_byte": nll / math.log(2) / len(TEXT.encode()),
        "tokens": count,
    }
    assert count == 135 - 5  # each of the 5 windows' first token is not predicted


def test_a_prefix_of_two_is_not_predicted():
    from tokenizers import processors

    model, tok = tiny_model(vocab=128), tiny_tokenizer()
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> <unk> $A", special_tokens=[("<s>", 0), ("<unk>", 2)]
    )
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    got = perplexity(model, tok, TEXT, window=32, progress=False)
    nll, count = _by_hand(model, [[0, 2, *ids[i : i + 30]] for i in range(0, len(ids), 30)], 2)
    assert got["tokens"] == count == 135 and got["ppl"] == pytest.approx(math.exp(nll / count), rel=1e-6)
    with pytest.raises(ValueError, match="longer than the tokenizer's prefix"):
        perplexity(model, tok, TEXT, window=2, progress=False)
