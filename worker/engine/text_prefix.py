"""What a tokenizer puts before a text: the ids every evaluation window and calibration block opens with.

A model is trained on texts that open with what its tokenizer adds (Gemma's `<bos>`: Gemma 3 270M's
WikiText-2 perplexity on 8 windows of 512 is 23.46 with it and 62.27 without, bench/results/gemma3_bos.md),
so windows cut from a longer text must open with it too, not only the first. Found by encoding a probe
with and without special tokens: the ids before the plain encoding are the prefix ([bos] for Llama and
Gemma tokenizers, [] for GPT-2 style ones such as SmolLM2's, whose windows are cut exactly as before).
"""

from __future__ import annotations

PROBE = "The quick brown fox"


def text_prefix(tokenizer) -> tuple[int, ...]:
    """The ids `tokenizer` puts before a text's own; () when it adds nothing there (or when the plain
    encoding is not found inside the special one, which no tokenizer we know does)."""
    plain = list(tokenizer(PROBE, add_special_tokens=False)["input_ids"])
    special = list(tokenizer(PROBE, add_special_tokens=True)["input_ids"])
    for start in range(len(special) - len(plain) + 1):
        if special[start : start + len(plain)] == plain:
            return tuple(int(i) for i in special[:start])
    return ()


def strip_prefix(ids: list[int], prefix: tuple[int, ...]) -> list[int]:
    """`ids` without the prefix they open with (a text encoded with the tokenizer's special tokens)."""
    n = len(prefix)
    return list(ids[n:]) if n and tuple(ids[:n]) == prefix else list(ids)
