"""A multimodal checkpoint's text model as a checkpoint of its own (nbl/families.TEXT_PARTS: Gemma 3's).

A job on Gemma3ForConditionalGeneration compresses its language model; the vision tower and the projector
are not read, fitted or published. The rest of the engine then sees a plain text family: this writes, once
per input (under the caller's models_dir, as a GGUF's conversion is), a folder with

    config.json    the text_config, complete (transformers' own defaults filled in), as its text family's
                   causal LM, with the head's tying
    *.safetensors  the text model's tensors renamed (`language_model.model.` -> `model.`), their bytes copied
                   file to file unread (shard_writer.copy_span): one tensor in host memory at most, none here
    the rest       tokenizer, chat template, generation config; not the image processor's files

The logits of the text model on text equal the multimodal model's (tests/worker/engine/loading/test_text_part.py).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

from nbl.families import FAMILIES, TEXT_PARTS, TextPart
from worker.engine.calibration.layer_source import tensor_files
from worker.engine.forms.shard_writer import INDEX_FILE, SAFETENSORS_DTYPES, spans, write_safetensors

IMAGE_FILES = ("preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json")
TORCH_DTYPES = {v: k for k, v in SAFETENSORS_DTYPES.items()}


def renamed(name: str, prefixes) -> str | None:
    """The text model's name of a checkpoint tensor, or None for a tensor outside the text model."""
    for old, new in prefixes:
        if name.startswith(old):
            return new + name[len(old) :]
    return None


def text_config(path: Path) -> tuple[dict, TextPart]:
    """The text model's complete config (transformers' defaults filled in) and the multimodal family's entry."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path, trust_remote_code=False)
    part = TEXT_PARTS[config.model_type]
    text = config.get_text_config().to_dict()
    text.update(model_type=part.family, architectures=[FAMILIES[part.family].model])
    return text, part


def extract_text_part(path: Path, out: Path) -> Path:
    """The text model of the multimodal checkpoint at `path`, written once at `out` (reused if present)."""
    if (out / "config.json").is_file():
        return out
    config, part = text_config(path)
    prefixes = part.prefixes
    by_file: dict[str, dict[str, str]] = {}  # source shard -> {its text tensors: their new names}
    for name, file in tensor_files(path).items():  # checked: every shard a file of the folder (weight_files.py)
        if (new := renamed(name, prefixes)) is not None:
            by_file.setdefault(file, {})[name] = new
    if not by_file:
        raise ValueError(f"{path}: no tensor of the text model (named {prefixes[0][0]}...)")
    config["tie_word_embeddings"] = not any(n.startswith("lm_head.") for f in by_file.values() for n in f.values())
    tmp = out.with_name(out.name + f".{os.getpid()}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    weight_map = {}
    for i, (file, names) in enumerate(sorted(by_file.items())):
        shard = "model.safetensors" if len(by_file) == 1 else f"model-{i + 1:05d}-of-{len(by_file):05d}.safetensors"
        found = spans(path / file)
        entries = {
            new: torch.empty(found[old][1], dtype=TORCH_DTYPES[found[old][0]], device="meta")
            for old, new in names.items()
        }
        source = {new: found[old][2] for old, new in names.items()}
        write_safetensors(tmp / shard, entries, source.__getitem__)
        weight_map.update(dict.fromkeys(entries, shard))
    if len(by_file) > 1:
        (tmp / INDEX_FILE).write_text(json.dumps({"metadata": {}, "weight_map": weight_map}, indent=2))
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    for f in path.iterdir():  # the tokenizer and generation files; a Hub snapshot's are links to its blobs
        if f.is_file() and not f.name.endswith(".safetensors") and f.name not in ("config.json", INDEX_FILE):
            if f.name not in IMAGE_FILES:
                shutil.copyfile(f, tmp / f.name)
    try:
        tmp.rename(out)
    except OSError:  # another process finished the same extraction first
        shutil.rmtree(tmp, ignore_errors=True)
    return out
