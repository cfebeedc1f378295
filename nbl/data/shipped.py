"""The offline copies of c4 and wikitext2 under NBL_DATA_DIR (the project's shared/data), and the most tokens
any tokenizer can make of one: known without a tokenizer, so the API can refuse at submit a job whose
calibration data cannot give what it asks for (nbl/data/heal.py), where the worker would find out by tokenizing.

The bound: a text of b UTF-8 bytes is at most b + 1 tokens (a token covers at least one byte, a byte-level BPE's
or a SentencePiece byte fallback's, but for the one '▁' SentencePiece may put before a text), and the worker's
stream adds one EOS a text (worker/engine/calibration/data.make_blocks): b + 2 a text. SmolLM2 makes 166,738 tokens of the
c4 copy's 741,230 so counted: the bound refuses only what cannot fit. The texts are those the worker's
`datasets` loader reads (worker/engine/calibration/data.load_texts): a JSON array or JSON lines' `text_field`, a text
file's lines, empty ones skipped. Torch-free; a file is read once for each size and mtime it has.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

# name -> split -> file under data_dir (worker/engine/calibration/data.py reads them; a name is matched lower-cased, "-" dropped)
LOCAL_ALIASES: dict[str, dict[str, str]] = {
    "c4": {"train": "c4/c4_demo.json", "validation": "c4/c4_validation_2k.jsonl"},
    # valid.txt: tokenized, <unk>
    "wikitext2": {"test": "wikitext-2/wiki.test.raw", "validation": "wikitext-2/valid.txt"},
}


def alias(name: str) -> str | None:
    """The shipped copy a dataset name means, as the worker matches it; None: a Hub dataset."""
    key = name.lower().replace("-", "")
    return key if key in LOCAL_ALIASES else None


def most_tokens(data_dir: Path | None, dataset: str, split: str, text_field: str) -> int | None:
    """The most tokens the shipped copy of `dataset` can give (texts and their EOS); None when it is not known
    here: no NBL_DATA_DIR (the worker reads the Hub's), a Hub dataset, a split or file this copy lacks."""
    name = alias(dataset)
    if data_dir is None or name is None or split not in LOCAL_ALIASES[name]:
        return None
    path = Path(data_dir) / LOCAL_ALIASES[name][split]
    try:
        stat = path.stat()
    except OSError:
        return None
    return _bound(str(path), stat.st_size, stat.st_mtime_ns, text_field)


@functools.lru_cache(maxsize=16)
def _bound(path: str, size: int, mtime_ns: int, text_field: str) -> int | None:
    """size and mtime_ns key the cache: a file replaced in place is read again."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        if path.endswith((".json", ".jsonl")):
            rows = (
                json.loads(text)
                if path.endswith(".json")
                else [json.loads(line) for line in text.splitlines() if line.strip()]
            )
            texts = [r.get(text_field) for r in rows if isinstance(r, dict)]
        else:  # `datasets`' text builder: a row a line
            texts = text.splitlines()
    except (OSError, ValueError):  # unreadable or not what its suffix says: the worker says why
        return None
    return sum(len(t.encode("utf-8", "surrogatepass")) + 2 for t in texts if isinstance(t, str) and t.strip())
