"""Calibration data: resolve a dataset spec to texts, then cut the token stream into blocks.

Blocking follows the reference code: tokenize each text without special tokens, append EOS,
concatenate, cut into `seq_len` blocks, keep the first `num_samples` (or, with shuffle, take the
documents in a seeded random order first). Each block opens with what the tokenizer puts before a text
(engine/text_prefix.py: Gemma's `<bos>`), then `seq_len - len(prefix)` tokens of the stream; a tokenizer
that adds nothing (SmolLM2, Qwen) is cut as the reference cuts.

A spec is a `datasets` path (+ config, split, text field), a local .json/.jsonl/.txt/.parquet
file, or a short name (`c4`, `wikitext2`) that resolves to the local copies under `data_dir`
(the caller's NBL_DATA_DIR, Settings.data_dir) when it is given, else to the Hub.

`datasets` resolves some names against the working directory: its packaged builders (`csv`, `json`,
`text`, ... with no data_files read every matching file there) and a local directory named like a Hub
id. Builder names are refused, and `load_dataset` runs in an empty directory made for the call, never
in the worker's own, so a name that slipped through still reads nothing.
"""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
import threading
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable, Iterator

import torch

from nbl import recipe as R
from nbl.data.dataset_names import refuse_packaged_builder
from nbl.data.shipped import LOCAL_ALIASES  # name -> split -> file under data_dir (the copies in shared/data)
from worker.engine.loading.hub_ids import refuse_path_shadowing
from worker.engine.text_prefix import text_prefix

LOCAL_SUFFIXES = {".json": "json", ".jsonl": "json", ".txt": "text", ".parquet": "parquet"}

# name -> (datasets path, config, data_files per split) on the Hub
HUB_ALIASES: dict[str, tuple[str, str | None, dict[str, str] | None]] = {
    "c4": (
        "allenai/c4",
        None,
        {
            "train": "en/c4-train.00000-of-01024.json.gz",
            "validation": "en/c4-validation.00000-of-00008.json.gz",
        },
    ),
    "wikitext2": ("Salesforce/wikitext", "wikitext-2-raw-v1", None),
}


class DataError(ValueError):
    """Calibration data that cannot give what was asked for (a user error)."""


@dataclass(frozen=True)
class DatasetSpec:
    path: str
    config: str | None = None
    split: str = R.SPLIT
    text_field: str = R.TEXT_FIELD

    def key(self) -> dict:
        return asdict(self)


def resolve(spec: DatasetSpec, data_dir: Path | None = None) -> tuple[str, dict]:
    """(description, kwargs for datasets.load_dataset) for a spec; `data_dir`: the shipped data sets."""
    name = spec.path.lower().replace("-", "")
    local = Path(spec.path).expanduser()
    if local.suffix in LOCAL_SUFFIXES and local.is_file():
        return str(local), _file_kwargs(local.resolve(), spec.split)
    if local.suffix in LOCAL_SUFFIXES:
        raise DataError(f"calibration file not found: {spec.path}")
    if name in LOCAL_ALIASES and data_dir:
        files = LOCAL_ALIASES[name]
        if spec.split not in files:
            raise DataError(
                f"dataset {spec.path!r}: the local copy under NBL_DATA_DIR has splits {sorted(files)}, "
                f"not {spec.split!r}"
            )
        path = (Path(data_dir) / files[spec.split]).resolve()
        if not path.is_file():
            raise DataError(f"dataset {spec.path!r}: {path} is missing (NBL_DATA_DIR={data_dir})")
        return str(path), _file_kwargs(path, spec.split)
    if name in HUB_ALIASES:
        path, config, data_files = HUB_ALIASES[name]
        kw = {"path": path, "name": spec.config or config, "split": spec.split}
        if data_files:
            kw = {
                "path": "json",
                "data_files": {spec.split: f"hf://datasets/{path}/{data_files[spec.split]}"},
                "split": spec.split,
            }
        return path, kw
    refuse_packaged_builder(spec.path, DataError)  # a loader of local files, not a dataset
    # datasets would read a directory of that name in the working directory instead of the Hub
    refuse_path_shadowing(spec.path, "dataset", DataError)
    return spec.path, {"path": spec.path, "name": spec.config, "split": spec.split}


def _file_kwargs(path: Path, split: str) -> dict:
    kind = LOCAL_SUFFIXES.get(path.suffix, "text")  # .raw and friends are plain text
    # datasets calls every local file's split "train" unless told otherwise; ask for what we name.
    return {"path": kind, "data_files": {"train": str(path)}, "split": "train"}


def load_texts(spec: DatasetSpec, data_dir: Path | None = None) -> Iterator[str]:
    """The spec's texts, in order, empty ones skipped. Streams from the Hub; files load locally."""
    import datasets

    desc, kw = resolve(spec, data_dir)
    local = kw["path"] in ("json", "text", "parquet") and "hf://" not in str(kw.get("data_files"))
    try:
        with scratch_cwd():  # names are resolved here; the rows stream from what was resolved
            ds = datasets.load_dataset(**kw, streaming=not local)
    except (FileNotFoundError, ValueError) as e:
        raise DataError(f"cannot load dataset {desc!r}: {e}") from e
    features = getattr(ds, "column_names", None) or []
    if features and spec.text_field not in features:
        raise DataError(f"dataset {desc!r} has no text field {spec.text_field!r}; its fields are {features}")
    for row in ds:
        if spec.text_field not in row:
            raise DataError(f"dataset {desc!r} has no text field {spec.text_field!r}; its fields are {sorted(row)}")
        text = row[spec.text_field]
        if text and text.strip():
            yield text


_CWD_LOCK = threading.Lock()


@contextlib.contextmanager
def scratch_cwd():
    """Make an empty private directory the working directory for the block, then remove it. The working
    directory belongs to the process: the lock keeps two loads from interleaving (the worker's own paths
    are absolute, so nothing else depends on it)."""
    with _CWD_LOCK, tempfile.TemporaryDirectory(prefix="nbl-data-") as scratch:
        before = os.getcwd()
        os.chdir(scratch)
        try:
            yield Path(scratch)
        finally:
            os.chdir(before)


def make_blocks(
    texts: Iterable[str],
    tokenizer,
    num_samples: int,
    seq_len: int,
    shuffle: bool = False,
    seed: int = 0,
) -> torch.Tensor:
    """(num_samples, seq_len) int64 token blocks, each opening with the tokenizer's prefix; raises DataError
    naming how many blocks exist."""
    if num_samples < 1 or seq_len < 2:
        raise DataError(f"need num_samples >= 1 and seq_len >= 2, got {num_samples} and {seq_len}")
    prefix = list(text_prefix(tokenizer))
    step = seq_len - len(prefix)  # the stream's tokens in a block
    if step < 1:
        raise DataError(f"seq_len {seq_len} leaves no room after the tokenizer's {len(prefix)}-token prefix")
    eos = tokenizer.eos_token_id
    if eos is None:
        raise DataError("the tokenizer has no EOS token to separate documents")
    if shuffle:
        texts = list(texts)
        random.Random(seed).shuffle(texts)
    need = num_samples * step
    stream: list[int] = []
    for text in texts:
        stream.extend(tokenizer(text, add_special_tokens=False)["input_ids"])
        stream.append(eos)
        if len(stream) >= need:
            break
    have = len(stream) // step
    if have < num_samples:
        raise DataError(
            f"calibration data gives {have} blocks of {seq_len} tokens ({len(stream)} tokens), "
            f"but num_samples={num_samples} were asked for"
        )
    body = torch.tensor(stream[:need], dtype=torch.long).view(num_samples, step)  # (N, seq_len - P)
    if not prefix:
        return body
    return torch.cat([torch.tensor(prefix, dtype=torch.long).expand(num_samples, -1), body], dim=1)
