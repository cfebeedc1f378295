"""What of a model's tokenizer_config.json transformers must not take as a path.

tokenizer_config.json is input, like a weight index: a team writes what it likes into it. transformers reads
its files by their standard names from the repo (tokenizer.json, vocab.json, ...), but some of the config's
own values it opens as given, absolute or against the worker's working directory: `gguf_file` (the tokenizer
and chat template are read from that GGUF), `vocab` and `merges` as strings (a BPE's files), and the `*_file`
arguments of a class that it does not resolve in the repo itself (`tokenizer_class` picks any class). A team's
repo naming `/.../published/beta/NAME/model-q8_0.gguf` had its job read another team's tokenizer and publish
it, and tell from the failure whether any path existed on the worker (issue 35 follow-up).

So every top-level value whose name says it is a file (or a folder, or a vocabulary), or that holds such a
value, is passed to from_pretrained as None, which transformers takes over the config's and then reads only
the repo's files. Nothing is refused: old configs on the Hub carry the path they were saved from
(`tokenizer_file`, `special_tokens_map_file`) that transformers never read, and those models still load.
Torch-free.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

CONFIG = "tokenizer_config.json"
# gguf_file, vocab, merges, entity_vocab, tgt_vocab, tokenizer_file, merges_file, dic_dir, spm_path, ...
NAMES_A_FILE = re.compile(r"gguf_file|merges|.*vocab|.*_(file|files|dir|path)")


def _names_a_file(key: object, value: object) -> bool:
    if isinstance(value, dict):
        return any(_names_a_file(k, v) for k, v in value.items())
    if isinstance(value, list):
        return any(_names_a_file(key, v) for v in value)
    return isinstance(value, str) and isinstance(key, str) and NAMES_A_FILE.fullmatch(key) is not None


def path_overrides(folder: Path) -> dict[str, None]:
    """Keyword arguments for AutoTokenizer.from_pretrained(folder, ...): None for each value of the folder's
    tokenizer_config.json that would name a file. A config that is missing, not a regular file (a FIFO is
    never opened) or not a JSON object gives none: transformers reads nothing from it either."""
    path = Path(folder) / CONFIG
    if not path.is_file():
        return {}
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return {}
    if not isinstance(config, dict):
        return {}
    return {key: None for key, value in config.items() if _names_a_file(key, value)}
