"""GGUF export: a checkpoint directory to llama.cpp's format, for `nbl export` and a job's publish.formats.

The work is llama.cpp's own: its converter (convert_hf_to_gguf.py, the tokenizer embedded) and its
quantizer (llama_model_quantize, K-quants included), run by integrations/gguf/export_gguf.py in the GGUF
venv (`make gguf-env`: llama-cpp-python built from its pinned sdist) as a subprocess, so the worker's
venv needs neither llama-cpp-python nor llama.cpp's pinned transformers. What exports is decided here
first, from config.json (nbl/outputs/gguf_formats.py): an nbl-form output is refused before anything runs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

from nbl.outputs.gguf_formats import check_type, gguf_arch, gguf_file, gguf_types

from .. import subproc
from ..engine.loading.weight_files import weight_map
from .gguf_config import check_converter_keys

SCRIPT = Path(__file__).resolve().parents[2] / "integrations" / "gguf" / "export_gguf.py"
DEFAULT_VENV = Path(__file__).resolve().parents[2] / ".venv-gguf"
PARTIAL = ".partial"  # an export in progress: `.model-q8_0.gguf.<random>.partial/`, never published


class GgufExportError(RuntimeError):
    """llama.cpp's converter or quantizer failed on a checkpoint that passed the checks."""


def gguf_python(python: Path | None = None) -> Path:
    """The GGUF venv's interpreter: `python` (Settings.gguf_python, NBL_GGUF_PYTHON) or the checkout's
    .venv-gguf; ValueError when there is none."""
    return subproc.venv_python(
        python, DEFAULT_VENV, "GGUF export needs llama.cpp's converter in the GGUF venv", "gguf-env", "NBL_GGUF_PYTHON"
    )


def exportable(model_dir: Path, where: str | None = None) -> str:
    """The GGUF architecture `model_dir` exports as; ValueError when it has none (naming it `where`)."""
    cfg = Path(model_dir) / "config.json"
    if not cfg.is_file():
        raise ValueError(f"{model_dir}: not a checkpoint directory (no config.json)")
    try:
        config = json.loads(cfg.read_text())
    except ValueError as e:
        raise ValueError(f"{cfg}: not JSON ({e})") from None
    if not isinstance(config, dict):
        raise ValueError(f"{cfg}: not a JSON object")
    where = where or str(model_dir)
    arch = gguf_arch(config, where)
    check_converter_keys(config, where)  # the converter's reading of it is transformers'
    return arch


def export_gguf(
    model_dir: Path, out: Path, kind: str, python: Path | None = None, timeout_s: float = 3600, should_stop=None
) -> dict:
    """Write `model_dir` as a GGUF of TYPE `kind` at `out` (replaced atomically); returns {path, type, arch, size}.
    `should_stop`: polled while llama.cpp runs (worker/subproc.py; a job's sink raises Cancelled from it).

    The converter writes into a directory made for this call alone (mkdtemp: a fresh random name, mode 0700,
    never an existing path or a symlink), and its file is renamed over `out`: a second attempt never shares a
    partial file with a first one still running, and a planted `out.partial` symlink is never written through.
    Its paths are absolute, so a folder named `--vocab-only` is a path to it, never an option. It runs with none
    of the worker's secrets, offline (subproc.child_env): it reads a checkpoint's files with transformers."""
    check_type(kind)
    arch = exportable(model_dir)
    weight_map(model_dir, Path(model_dir).name)  # the converter reads the index's shards and *.safetensors: ours only
    exe = gguf_python(python)
    model_dir, out = Path(model_dir).absolute(), Path(out).absolute()
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=PARTIAL, dir=out.parent))
    try:
        tmp = work / out.name
        try:
            proc = subproc.run(
                [str(exe), str(SCRIPT), str(model_dir), str(tmp), kind],
                timeout_s=timeout_s,
                should_stop=should_stop,
                cwd=work,
                env=subproc.child_env(str(work / "hf")),
            )
        except subprocess.TimeoutExpired:
            raise GgufExportError(
                f"GGUF export of {model_dir} as {kind} did not finish within {timeout_s:g} s"
            ) from None
        if proc.returncode != 0:
            tail = " | ".join(line.strip() for line in proc.stderr.strip().splitlines()[-3:])
            raise GgufExportError(
                f"GGUF export of {model_dir} as {kind} failed (exit {proc.returncode}): {tail[-600:]}"
            )
        tmp.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"path": str(out), "type": kind, "arch": arch, "size": out.stat().st_size}


def clear_partials(folder: Path) -> None:
    """What an earlier attempt's export left in a job's output folder (killed, it ran no cleanup): its private
    directories, and the shared `.partial` file the exporter wrote before. Only a job's own folder is cleared:
    one attempt owns it at a time (the lease), while `nbl export` may run twice beside one --out."""
    for stale in Path(folder).glob(f"*.gguf*{PARTIAL}"):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)


def export_formats(model_dir: Path, formats, python: Path | None = None, should_stop=None) -> list[dict]:
    """The GGUF files of a job's publish.formats, written into the output's own folder (model-TYPE.gguf), so
    they are published, listed and hashed with its other files."""
    clear_partials(model_dir)
    return [
        export_gguf(model_dir, Path(model_dir) / gguf_file(kind), kind, python, should_stop=should_stop)
        for kind in gguf_types(formats)
    ]
