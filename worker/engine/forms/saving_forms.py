"""Write a linear or fold output (nbl/outputs/forms.py), tensor by tensor from the base checkpoint's shards.

    fold, block    the base family's own config and class with the run layers removed (num_hidden_layers,
                   layer_types shortened), the later layers renumbered, each run's map folded into the
                   down_proj before it (fold_runs.py): no auto_map, no .py file, no remote code
    linear, and    DeciLMForCausalLM (decilm.py's config.json, modeling_decilm.py beside it): replaced
    fold attn      attention and MLP weights absent, `self_attn.linear_attn.weight` /
                   `mlp.linear_mlp.weight` the maps, fold's maps folded into the previous down_proj

Tokenizer files, nbl_scores.json and the modes as saving.py writes them; written to a sibling directory
and renamed into place.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import torch

from nbl.families import FAMILIES
from nbl.outputs.forms import writes_decilm
from worker.engine.calibration.layer_source import tensor_files
from worker.engine.forms.decilm import decilm_config
from worker.engine.forms.fold_runs import fold_targets, folded
from worker.engine.forms.kept_layers import kept_config
from worker.engine.forms.saving import finish_output, strip_code_refs
from worker.engine.forms.shard_writer import MAX_SHARD_SIZE, layout, write_shards
from worker.engine.modeling import modeling_decilm

_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


def _base_tensor(base: Path, files: dict, name: str) -> torch.Tensor:
    from safetensors import safe_open

    with safe_open(str(base / files[name]), "pt", device="cpu") as f:
        return f.get_tensor(name)


def folded_tensors(base: Path, plan, maps: dict, family: str) -> dict[str, torch.Tensor]:
    """Base-numbered name -> (I + T)·down_proj for every fold map: each of the MLP branch's output projections the
    family's entry names (its bias too, if the base has one; every expert's, for a mixture of experts)."""
    files = tensor_files(base)
    down = [(re.compile(pattern), dim) for pattern, dim in FAMILIES[family].down]
    out = {}
    for key, j in fold_targets(plan.form, plan.mode, plan.layers).items():
        prefix = f"model.layers.{j}."
        for name in files:
            rest = name[len(prefix) :] if name.startswith(prefix) else None
            dims = [dim for pattern, dim in down if rest is not None and pattern.fullmatch(rest)]
            if dims:
                out[name] = folded(_base_tensor(base, files, name), maps[key].weight, dims[0])
    return out


def write_form(
    base: Path,
    plan,
    maps: dict,
    dtype: torch.dtype,
    tokenizer,
    out: Path,
    family: str,
    report: dict,
    max_shard_size: int | str = MAX_SHARD_SIZE,
) -> Path:
    """Write the output of `plan` (surgery.Plan, form linear or fold) with `maps` in `dtype` to `out`."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    base, out = Path(base), Path(out)
    tmp = out.with_name(out.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    dtype_name = str(dtype).split(".")[1]
    extra = folded_tensors(base, plan, maps, family)
    if writes_decilm(plan.form, plan.mode):
        cfg = decilm_config(
            json.loads((base / "config.json").read_text()), plan.form, plan.mode, plan.layers, dtype_name
        )
        with torch.device("meta"):
            model = modeling_decilm.DeciLMForCausalLM(modeling_decilm.DeciLMConfig(**cfg)).to(dtype)
        where = "self_attn.linear_attn" if plan.mode == "attn" else "mlp.linear_mlp"
        if plan.form == "linear":
            extra.update({f"model.layers.{i}.{where}.weight": maps[i].weight for i in plan.layers})
        write_shards(tmp, base, model, extra, max_shard_size)
    else:  # fold block: the base's class, fewer layers
        base_config = AutoConfig.from_pretrained(base, trust_remote_code=False)
        kept = [i for i in range(base_config.num_hidden_layers) if i not in set(plan.layers)]
        # per-layer keys (layer_types, a MoE's sparse-layer pattern) kept right for the layers that remain
        config = type(base_config).from_dict(kept_config(base_config.to_dict(), kept))
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype).eval()
        renumber = {f"model.layers.{j}.": f"model.layers.{i}." for j, i in enumerate(kept)}

        def source(name: str) -> str:
            m = _LAYER.match(name)
            return renumber[m.group(0)] + name[m.end() :] if m else name

        # by the checkpoint's names (a MoE's experts one by one), as the writer lays them out
        new_extra = {n: extra[source(n)] for n in layout(model) if source(n) in extra}
        write_shards(tmp, base, model, new_extra, max_shard_size, source)
        config.dtype = dtype_name
        config.architectures = [type(model).__name__]
        config.save_pretrained(tmp)
    if (base / "generation_config.json").is_file():
        GenerationConfig.from_pretrained(base).save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    strip_code_refs(tmp, type(tokenizer).__name__)
    if writes_decilm(plan.form, plan.mode):  # after strip_code_refs, which removes every .py and auto_map
        shutil.copyfile(modeling_decilm.__file__, tmp / "modeling_decilm.py")
        (tmp / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return finish_output(tmp, out, report)
