"""Write a compressed model as a self-contained Hugging Face checkpoint.

    config.json          the base config + `nbl` {mode, method, layers} + auto_map, model_type nbl_<family>
    model.safetensors    all weights, the linear maps included, replaced modules' weights absent (sharded as
                         save_pretrained shards, with model.safetensors.index.json, past max_shard_size)
    modeling_nbl.py      the one modeling file (torch + transformers only)
    tokenizer files
    nbl_scores.json      every layer's scores and the selection
    README.md            the model card (worker/publish/card.py), nbl_scores.png its score plot

It loads anywhere with `AutoModelForCausalLM.from_pretrained(dir, trust_remote_code=True)`. The only
code it names is ours: config.json's auto_map, to modeling_nbl.py. Nothing the tokenizer writes may
name any (an auto_map copied from an input's tokenizer_config.json would run that code for whoever
loads the tokenizer with trust_remote_code), and tokenizer_config.json names its class, so
`AutoTokenizer.from_pretrained(dir, trust_remote_code=False)` needs no code of ours either.
`write_compressed` writes the same files from the base checkpoint's shards, tensor by tensor, without
the model in memory (shard_writer.py); `save_compressed` saves a compressed model in memory.
Files are written to a temporary sibling directory and renamed into place, so a crash never leaves
a half-written output at `out`.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

from worker.engine.forms.shard_writer import MAX_SHARD_SIZE, map_tensors, skeleton, write_shards
from worker.engine.loading.custom_code import CODE_KEYS, DATA_JSON
from worker.engine.modeling import modeling_nbl

SCORES_FILE = "nbl_scores.json"


def save_compressed(model, tokenizer, out: Path, family: str, report: dict) -> Path:
    """Save the (already compressed, in-memory) `model` to `out`; returns `out`."""
    return _write(
        out,
        lambda tmp: model.save_pretrained(tmp, safe_serialization=True),
        tokenizer,
        family,
        model.config.nbl,
        report,
    )


def write_compressed(
    base: Path,
    plan: dict,
    maps: dict,
    dtype: torch.dtype,
    tokenizer,
    out: Path,
    family: str,
    report: dict,
    max_shard_size: int | str = MAX_SHARD_SIZE,
) -> Path:
    """What save_compressed writes for the base model compressed by `plan` (Plan.as_config()) and `maps`
    (layer -> LinearMap) in `dtype`, written from the base checkpoint directory's shards one tensor at a
    time (shard_writer.py): the whole model is never in memory. Returns `out`."""
    from transformers import AutoConfig, GenerationConfig

    base = Path(base)
    model = skeleton(AutoConfig.from_pretrained(base, trust_remote_code=False), dtype, plan)

    def weights(tmp: Path) -> None:
        write_shards(tmp, base, model, map_tensors(plan, maps), max_shard_size)
        # as save_pretrained writes them: the dtype's name, the class, the plan (surgery.apply sets it)
        model.config.dtype = str(dtype).split(".")[1]
        model.config.architectures = [type(model).__name__]
        model.config.nbl = plan
        model.config.save_pretrained(tmp)
        if model.can_generate():  # from_pretrained would have read the base's generation config
            gen = (
                GenerationConfig.from_pretrained(base)
                if (base / "generation_config.json").is_file()
                else model.generation_config
            )
            gen.save_pretrained(tmp)

    return _write(out, weights, tokenizer, family, plan, report)


def _write(out: Path, weights, tokenizer, family: str, plan: dict, report: dict) -> Path:
    """`weights(dir)` writes the weights, config.json and generation_config.json; the rest is the same."""
    out = Path(out)
    tmp = out.with_name(out.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    weights(tmp)
    tokenizer.save_pretrained(tmp)
    strip_code_refs(tmp, type(tokenizer).__name__)
    shutil.copyfile(modeling_nbl.__file__, tmp / "modeling_nbl.py")

    cfg_path = tmp / "config.json"
    cfg = json.loads(cfg_path.read_text())
    config_cls, model_cls = modeling_nbl.class_names(family)
    cfg.update(
        model_type=f"nbl_{family}",
        architectures=[model_cls],
        auto_map={"AutoConfig": f"modeling_nbl.{config_cls}", "AutoModelForCausalLM": f"modeling_nbl.{model_cls}"},
        nbl=plan,
    )
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    # The card (README.md, the plot) is written from this file once, at publishing (worker/pipeline.py).
    return finish_output(tmp, out, report)


def finish_output(tmp: Path, out: Path, report: dict) -> Path:
    """The last steps every writer shares: the scores file, the modes, then `tmp` replaces `out` whole."""
    (tmp / SCORES_FILE).write_text(json.dumps(report, indent=2) + "\n")
    share_modes(tmp)
    if out.exists():
        shutil.rmtree(out)
    tmp.rename(out)
    return out


def strip_code_refs(directory: Path, tokenizer_class: str) -> None:
    """Drop every Python file and every top-level auto_map / custom_pipelines from the JSON files saved so
    far (config.json gets ours afterwards), and name the tokenizer's class in tokenizer_config.json."""
    for f in directory.glob("*.py"):
        f.unlink()
    for f in directory.glob("*.json"):
        if f.name in DATA_JSON:
            continue
        data = json.loads(f.read_text())
        if not isinstance(data, dict):
            continue
        clean = {k: v for k, v in data.items() if k not in CODE_KEYS}
        if f.name == "tokenizer_config.json":
            clean.setdefault("tokenizer_class", tokenizer_class)
        if clean != data:
            f.write_text(json.dumps(clean, indent=2, ensure_ascii=False) + "\n")


def share_modes(directory: Path) -> None:
    """Give every file the mode a plain open() would (0666 less the umask, e.g. 0644). The safetensors
    writer saves through a private temporary file (0600), but outputs and publish dirs are shared."""
    mask = os.umask(0)  # the only portable way to read the umask; restored at once
    os.umask(mask)
    for f in Path(directory).rglob("*"):
        if f.is_file() and not f.is_symlink():
            f.chmod(0o666 & ~mask)
