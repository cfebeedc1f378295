"""The load check before publishing: the saved directory, reloaded in a fresh Python process the way a
user loads it (`AutoModelForCausalLM.from_pretrained(dir, trust_remote_code=True)`), must generate, and
its logits on fixed token ids must match those of the compressed model, computed before the reload
(one decoder layer at a time, from the base checkpoint and the maps: engine/forms/layerwise_logits.py).

Why a fresh process: in the worker, modeling_nbl and the surgery are already imported, so an
in-process reload can pass while the directory alone is broken (a missing file, a class that only
exists in our package, weights saved under the wrong names). The child cannot import `worker` or
`service` at all, and runs from an empty directory with an empty Hugging Face cache, offline.

    ref = reference(model)              # right after saving (compress.run's on_saved)
    check(out_dir, ref)                 # later, before publishing; raises LoadCheckError
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import subproc
from ..engine import placement
from ..engine.devices import default_devices
from ..engine.loading.weight_files import weight_map

PROBE_TOKENS = 16
PROMPT_TOKENS = 6
NEW_TOKENS = 8
# max |logit difference| allowed, relative to max(1, max |logit|): float32 recomputes to ~1e-6; 16-bit
# weights differ by rounding on other kernels
TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-6}
TOLERANCE_16BIT = 2e-2

CHILD = textwrap.dedent(
    """
    import sys
    sys.modules["worker"] = None   # the output must need nothing of ours: torch + transformers only
    sys.modules["service"] = None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    path, probe, out = sys.argv[1:4]
    p = torch.load(probe, weights_only=True)
    tok = AutoTokenizer.from_pretrained(path)
    tok("load check")
    spread = p["max_memory"] is not None  # larger than one device: accelerate places it (device_map="auto")
    kw = dict(device_map="auto", max_memory=p["max_memory"], offload_folder=p["offload"]) if spread else {}
    model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True, dtype=p["dtype"],
                                                 use_safetensors=True, **kw)
    model = (model if spread else model.to(p["device"])).eval()
    first = model.device if spread else torch.device(p["device"])  # meta: all of it offloaded to disk
    ids = p["ids"].to("cpu" if first.type == "meta" else first)
    with torch.no_grad():
        logits = model(ids).logits.float().cpu()
        prompt = ids[:, : p["prompt"]]
        gen = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=p["new"],
                             min_new_tokens=p["new"], do_sample=False, pad_token_id=0).cpu()
    placed = sorted({str(d) for d in getattr(model, "hf_device_map", {}).values()}) if spread else [p["device"]]
    torch.save({"logits": logits, "generated": gen, "cls": type(model).__name__, "placed": placed}, out)
    """
)


class LoadCheckError(RuntimeError):
    """The saved output does not load, generate or reproduce the in-memory model (a system error:
    our save is broken, not the user's input)."""


@dataclass
class Reference:
    ids: torch.Tensor  # (1, T) the probe token ids
    logits: torch.Tensor  # (1, T, V) float32, on CPU
    dtype: torch.dtype
    device: str


def probe_ids(vocab_size: int, n: int = PROBE_TOKENS) -> torch.Tensor:
    """Fixed, spread-out token ids below the vocabulary size (no tokenizer needed). # (1, n)"""
    return torch.tensor([[(7919 * i + 13) % vocab_size for i in range(1, n + 1)]], dtype=torch.long)


@torch.no_grad()
def reference(model) -> Reference:
    """The compressed model's logits on the probe ids, taken before anything is reloaded. `model`: the
    compressed model in memory, or engine/forms/layerwise_logits.LayerwiseModel, which computes them one
    decoder layer at a time from the base checkpoint and the maps (compress.run's on_saved)."""
    ids = probe_ids(model.config.vocab_size)
    if isinstance(model, torch.nn.Module):
        param = next(model.parameters())
        logits = model(ids.to(param.device)).logits.float().cpu()  # (1, T, V)
        return Reference(ids=ids, logits=logits, dtype=param.dtype, device=param.device.type)
    return Reference(ids=ids, logits=model.logits(ids), dtype=model.dtype, device=model.device.type)


def tolerance(ref: Reference, saved: str | None = None) -> float:
    """`saved`: the dtype config.json says the weights were saved in (publish.dtype); 16-bit weights
    differ from the float32 model they were computed as by their rounding."""
    coarse = ref.dtype if saved in (None, "float32", "float64") else torch.bfloat16
    return TOLERANCE.get(coarse, TOLERANCE_16BIT) * max(1.0, ref.logits.abs().max().item())


def _rounding_hint(dtype: str | None) -> str:
    """A 16-bit output that misses: its rounding, amplified by maps of large norm (fitted on few tokens), not a
    broken save; say what keeps it exact (seen: SmolLM2 attn k=8 from 4 x 64 calibration tokens, in bfloat16)."""
    if dtype not in ("bfloat16", "float16"):
        return ""
    return (
        f"; the output was saved in {dtype}, whose rounding maps fitted on few calibration tokens amplify: "
        "calibrate on more tokens, or set publish.dtype float32 (--dtype float32 in nbl compress)"
    )


def saved_dtype(path: Path) -> str | None:
    try:
        cfg = json.loads((Path(path) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return cfg.get("dtype") or cfg.get("torch_dtype") if isinstance(cfg, dict) else None


def max_memory_for(path: Path, ref: Reference, devices: list[str] | None = None) -> dict | None:
    """None when the output's weights fit the first of `devices` (the run's; None: every visible GPU) or
    the reference was taken on the CPU, else accelerate's max_memory over those GPUs and the host, the
    rest offloaded to disk (engine/placement.py, as evaluation places it)."""
    if ref.device != "cuda":
        return None  # on the CPU, host memory is the one device
    return placement.max_memory_for(path, devices or default_devices(torch.cuda.device_count()))


def check(
    path: str | Path,
    ref: Reference,
    timeout_s: float = 900,
    max_memory: dict | None = None,
    devices: list[str] | None = None,
    should_stop=None,
) -> dict:
    """Reload `path` in a fresh process and compare; returns {"max_abs_diff", "tolerance", "class", "placed"
    (where the weights went: the device, or device_map's devices and "disk"), "devices" (those it could
    spread over)}. `max_memory` (accelerate's, e.g. {0: bytes, "cpu": bytes}): load with device_map="auto"
    within it, the rest offloaded to disk; None: max_memory_for decides over `devices` (the run's; None:
    every visible GPU), one device when the output fits the first. `should_stop`: polled while the child runs
    (worker/subproc.py: the child dies with the worker, on a cancel, at the timeout). Raises LoadCheckError saying
    what went wrong."""
    path = Path(path).resolve()
    weight_map(path, path.name)  # the child's from_pretrained reads only the output's own files (weight_files.py)
    devices = list(devices or default_devices(torch.cuda.device_count()))
    max_memory = max_memory if max_memory is not None else max_memory_for(path, ref, devices)
    with tempfile.TemporaryDirectory(prefix="nbl-loadcheck-") as tmp:
        probe, out = Path(tmp) / "probe.pt", Path(tmp) / "out.pt"
        device = devices[0] if devices[0].startswith(ref.device) else ref.device  # one device: the run's first
        torch.save(
            {
                "ids": ref.ids,
                "dtype": ref.dtype,
                "device": device,
                "prompt": PROMPT_TOKENS,
                "new": NEW_TOKENS,
                "max_memory": max_memory,
                "offload": str(Path(tmp) / "offload"),
            },
            probe,
        )
        cwd = Path(tmp) / "cwd"
        cwd.mkdir()
        try:
            proc = subproc.run(
                [sys.executable, "-c", CHILD, str(path), str(probe), str(out)],
                timeout_s=timeout_s,
                should_stop=should_stop,
                cwd=cwd,
                env=subproc.child_env(str(Path(tmp) / "hf")),
            )
        except subprocess.TimeoutExpired:
            raise LoadCheckError(
                f"load check: {path.name} did not load and generate within {timeout_s:g} s in a fresh process"
            ) from None
        if proc.returncode != 0:
            tail = " | ".join(line.strip() for line in proc.stderr.strip().splitlines()[-3:])
            raise LoadCheckError(
                f"load check: {path.name} does not load in a fresh process with from_pretrained "
                f"(exit {proc.returncode}): {tail[-600:]}"
            )
        got = torch.load(out, weights_only=True)
    if got["logits"].shape != ref.logits.shape:
        raise LoadCheckError(
            f"load check: {path.name} reloaded gives logits of shape {tuple(got['logits'].shape)}, "
            f"expected {tuple(ref.logits.shape)}"
        )
    diff = (got["logits"] - ref.logits).abs().max().item()
    tol = tolerance(ref, saved_dtype(path))
    if not diff <= tol:  # also catches NaN
        raise LoadCheckError(
            f"load check: {path.name} reloaded in a fresh process does not reproduce the compressed "
            f"model: max |logit difference| {diff:.3g} > tolerance {tol:.3g}" + _rounding_hint(saved_dtype(path))
        )
    generated = got["generated"].shape[-1] - PROMPT_TOKENS
    if generated != NEW_TOKENS:
        raise LoadCheckError(f"load check: {path.name} generated {generated} tokens, expected {NEW_TOKENS}")
    return {"max_abs_diff": diff, "tolerance": tol, "class": got["cls"], "placed": got["placed"], "devices": devices}
