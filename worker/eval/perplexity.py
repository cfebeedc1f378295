"""Perplexity on a text corpus: non-overlapping windows, as in the paper and GPTQ-style evaluations.

The corpus is tokenized once as a whole, and its tokens are cut into windows that each open with what
the tokenizer puts before a text (engine/text_prefix.py: Gemma's `<bos>`, nothing for SmolLM2's or
Qwen's), then `window - len(prefix)` of the text's tokens; the last, shorter window is scored too.
Inside each window every text token is predicted from those before it but a window's first when
there is no prefix (nothing predicts it), and the prefix is never predicted, so

    ppl            = exp(total NLL / predicted tokens)
    bits_per_byte  = total NLL / ln 2 / UTF-8 bytes of the text scored

Corpora by name: `wikitext2` (WikiText-2 raw test) and `c4` (C4 validation, 2,000 documents)
resolve under the caller's data directory (NBL_DATA_DIR); any other name is read as a text file.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Callable

import torch
from tqdm.auto import tqdm

from ..engine.placement import input_device
from ..engine.scoring.likelihood import nll_sum
from ..engine.text_prefix import strip_prefix, text_prefix

CORPORA = {"wikitext2": "wikitext-2/wiki.test.raw", "c4": "c4/c4_validation_2k.jsonl"}


def corpus_text(name: str, data_dir: Path | None = None) -> str:
    """The text of a named corpus (under `data_dir`) or a file (.txt/.raw as is; .json/.jsonl texts joined
    by blank lines)."""
    rel = CORPORA.get(name.lower().replace("-", ""))
    if rel is not None:
        if not data_dir:
            raise ValueError(f"perplexity corpus {name!r} needs NBL_DATA_DIR (the offline data sets)")
        path = Path(data_dir) / rel
    else:
        path = Path(name).expanduser()
    if not path.is_file():
        raise ValueError(f"perplexity corpus not found: {path}")
    if path.suffix == ".jsonl":
        return "\n\n".join(json.loads(line)["text"] for line in path.read_text().splitlines() if line.strip())
    if path.suffix == ".json":
        return "\n\n".join(r["text"] for r in json.loads(path.read_text()))
    return path.read_text()


def default_window(model) -> int:
    return min(int(getattr(model.config, "max_position_embeddings", 2048) or 2048), 2048)


@torch.no_grad()
def perplexity(
    model,
    tokenizer,
    text: str,
    window: int | None = None,
    max_tokens: int | None = None,
    batch_size: int = 1,
    progress: bool = True,
    on_window: Callable[[int, int], None] | None = None,
) -> dict:
    """{"ppl", "bits_per_byte", "tokens"} of `text`; `max_tokens` scores only the text's first tokens (the
    prefix aside), and when that cuts the text short, "corpus_tokens" says how many it had (the card and the
    job's warning quote both). `on_window(done, total)` before the first batch of windows (done 0) and after each (it may raise to cancel)."""
    window = window or default_window(model)
    prefix = text_prefix(tokenizer)
    first = max(len(prefix), 1)  # the first position predicted in a window
    if window < 2 or window <= len(prefix):
        raise ValueError(f"window must be at least 2 tokens and longer than the tokenizer's prefix {list(prefix)}")
    # the tokenizer's own call, as ever, then the prefix it put at the start taken off (each window gets its own)
    enc = tokenizer(text, return_offsets_mapping=max_tokens is not None)
    ids = torch.tensor(strip_prefix(enc["input_ids"], prefix), dtype=torch.long)
    n_bytes = len(text.encode("utf-8"))
    corpus_tokens = len(ids)
    if max_tokens is not None and max_tokens < len(ids):
        ids = ids[:max_tokens]
        # bytes of the text those tokens cover, for an honest bits-per-byte on a prefix
        end = max(e for _, e in enc["offset_mapping"][len(enc["input_ids"]) - corpus_tokens :][:max_tokens])
        n_bytes = len(text[:end].encode("utf-8"))
    device = input_device(model)  # under device_map, where its first layer runs
    step, head = window - len(prefix), torch.tensor(prefix, dtype=torch.long)
    windows = [torch.cat([head, ids[i : i + step]]) for i in range(0, len(ids), step)]
    windows = [w for w in windows if len(w) > first]
    nll, count = 0.0, 0
    if on_window is not None:  # the count first: the first batch's layers are reported as they pass (steps.py)
        on_window(0, len(windows))
    for start in tqdm(range(0, len(windows), batch_size), desc="perplexity", unit="win", disable=not progress):
        group = windows[start : start + batch_size]
        if len({len(w) for w in group}) > 1:  # the short last window goes alone
            group_list = [[w] for w in group]
        else:
            group_list = [group]
        for g in group_list:
            s, c = nll_sum(model, torch.stack(g).to(device), first)  # (B, T)
            nll, count = nll + s, count + c
        if on_window is not None:
            on_window(min(start + batch_size, len(windows)), len(windows))
    out = {"ppl": math.exp(nll / count), "bits_per_byte": nll / math.log(2) / n_bytes, "tokens": count}
    if len(ids) < corpus_tokens:
        out["corpus_tokens"] = corpus_tokens
    return out
