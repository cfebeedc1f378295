"""An output written once more, quantized (issue 39): a fold checkpoint directory (block: the base's own class; attn:
a DeciLM with our modeling_decilm.py) to a compressed-tensors checkpoint vLLM loads with no code of ours (a DeciLM's
config class aside), for a job's publish.quantize and `nbl compress --quantize` (worker/quant/stage.py).

The work is llm-compressor's (`oneshot`: GPTQ on calibration blocks, after SmoothQuant for W8A8, or round-to-nearest for FP8), run by
integrations/quant/quantize.py in the quantization venv (`make quant-env`) as a subprocess, as the GGUF export
runs llama.cpp's tools: llm-compressor pins a transformers older than the worker's. What can be quantized is
decided here first, from the form and config.json (nbl/outputs/quant_schemes.py), before anything runs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from nbl.outputs.quant_schemes import GPTQ_SAMPLES, GPTQ_SEQ_LEN, IGNORE, SCHEMES, group_size, quantized_widths
from nbl.outputs.quant_schemes import shape_error as scheme_shape_error

from .. import subproc
from ..engine.loading.weight_files import weight_map
from ..engine.modeling import modeling_decilm
from ..engine.placement import weight_bytes

SCRIPT = Path(__file__).resolve().parents[2] / "integrations" / "quant" / "quantize.py"
DEFAULT_VENV = Path(__file__).resolve().parents[2] / ".venv-quant"


class QuantizeError(RuntimeError):
    """llm-compressor failed on a checkpoint that passed the checks."""


def quant_python(python: Path | None = None) -> Path:
    """The quantization venv's interpreter: `python` (a caller's) or the checkout's .venv-quant."""
    return subproc.venv_python(
        python,
        DEFAULT_VENV,
        "quantizing needs llm-compressor in the quantization venv",
        "quant-env",
    )


def ours(model_dir: Path) -> bool:
    """A DeciLM output's modeling_decilm.py is the one this worker installs, byte for byte: the code that
    trust_remote_code will run in the quantization venv is ours, never a checkpoint's."""
    theirs = Path(model_dir) / Path(modeling_decilm.__file__).name
    return theirs.is_file() and theirs.read_bytes() == Path(modeling_decilm.__file__).read_bytes()


def shapes(model_dir: Path, schemes, what: str) -> None:
    """ValueError naming `what` when a scheme cannot take the model (a width w4a16's groups do not divide)."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    for s in schemes:
        if (why := scheme_shape_error(s, config)) is not None:
            raise ValueError(f"publish.quantize {s}: {what}: {why}")


def calibration_blocks(blocks: list[list[int]]) -> list[list[int]]:
    """The blocks GPTQ sees: the job's own calibration blocks, at most llm-compressor's recommended count and
    length (its examples use 512 x 2048), never more than the job calibrated on."""
    return [b[:GPTQ_SEQ_LEN] for b in blocks[:GPTQ_SAMPLES]]


def quantize(
    model_dir: Path,
    out: Path,
    scheme: str,
    blocks: list[list[int]] | None = None,
    python: Path | None = None,
    timeout_s: float = 3600,
    should_stop=None,
) -> dict:
    """Write `model_dir` quantized by `scheme` at `out` (replaced whole); returns what quantize.py did plus
    {path, scheme, bytes}. `blocks`: token-id blocks for a GPTQ scheme (required there)."""
    config = json.loads((Path(model_dir) / "config.json").read_text())
    decilm = config.get("model_type") in ("nemotron-nas", "deci")
    if "nbl" in config or (decilm and not ours(Path(model_dir))):
        raise ValueError(
            f"{model_dir}: only a fold output (the base's own class, or a DeciLM with our code) can be quantized"
        )
    if (why := scheme_shape_error(scheme, config)) is not None:
        raise ValueError(f"{model_dir}: {why}")
    weight_map(model_dir, Path(model_dir).name)  # transformers reads the index's shards: ours only
    if Path(out).exists() and not (Path(out) / "quantization.json").is_file():  # replaced only if it is ours
        raise ValueError(f"{out} exists and is not a quantized output (no quantization.json): move it first")
    s, exe = SCHEMES[scheme], quant_python(python)
    model_dir, out = Path(model_dir).absolute(), Path(out).absolute()
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    try:
        cmd = [str(exe), str(SCRIPT), str(model_dir), str(work / out.name), s.preset, "--ignore", *IGNORE]
        cmd += ["--trust-remote-code"] if decilm else []  # our modeling_decilm.py, checked above
        if s.gptq:
            if not blocks:
                raise ValueError(f"{scheme} is fitted by GPTQ on calibration data, and none was given")
            (work / "ids.json").write_text(json.dumps(calibration_blocks(blocks)))
            cmd += ["--gptq", "--ids", str(work / "ids.json")]
        if s.smoothquant is not None:
            cmd += ["--smoothquant", str(s.smoothquant)]
        if scheme == "w4a16":
            cmd += ["--group", str(group_size(quantized_widths(config).values()))]
        try:
            proc = subproc.run(
                cmd, timeout_s=timeout_s, should_stop=should_stop, cwd=work, env=subproc.child_env(str(work / "hf"))
            )
        except subprocess.TimeoutExpired:
            raise QuantizeError(f"quantizing {model_dir} as {scheme} did not finish within {timeout_s:g} s") from None
        if proc.returncode != 0:
            tail = " | ".join(line.strip() for line in proc.stderr.strip().splitlines()[-3:])
            raise QuantizeError(f"quantizing {model_dir} as {scheme} failed (exit {proc.returncode}): {tail[-600:]}")
        facts = json.loads(proc.stdout.strip().splitlines()[-1])
        if out.exists():
            shutil.rmtree(out)
        (work / out.name).rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"path": str(out), "scheme": scheme, "bytes": weight_bytes(out), **facts}
