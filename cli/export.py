"""`nbl export DIR --format gguf --type TYPE --out FILE.gguf`: a checkpoint directory (an output, or a base)
to llama.cpp's GGUF, by llama.cpp's converter and quantizer in the GGUF venv (worker/publish/gguf_export.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nbl.outputs.gguf_formats import EXPORTING_FORMS, GGUF_TYPES


def add_export(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write a checkpoint directory as a GGUF file (llama.cpp, ollama)",
        description=f"Convert a checkpoint directory to GGUF with llama.cpp's own converter and quantizer (the GGUF "
        f"venv: `make gguf-env`, or NBL_GGUF_PYTHON). Exports: {EXPORTING_FORMS}; an nbl-form output is refused.",
    )
    p.add_argument("dir", type=Path, help="the checkpoint directory (config.json, safetensors, tokenizer)")
    p.add_argument("--format", required=True, choices=["gguf"], help="the output format")
    p.add_argument(
        "--type",
        required=True,
        choices=GGUF_TYPES,
        dest="kind",
        help="f32/f16/bf16: converted; q8_0/q4_k_m: quantized by llama.cpp's quantizer",
    )
    p.add_argument("--out", required=True, type=Path, help="the .gguf file to write (replaced if present)")
    p.add_argument("--json", action="store_true", help="print {path, type, arch, size} as JSON")
    p.set_defaults(func=cmd_export)


def cmd_export(args) -> int:
    from service.core.settings import Settings
    from worker.publish.gguf_export import GgufExportError, export_gguf

    if not args.dir.is_dir():
        raise ValueError(f"not a checkpoint directory: {args.dir}")
    if args.out.suffix != ".gguf":
        raise ValueError(f"--out must name a .gguf file, got {args.out}")
    if not args.out.parent.is_dir():
        raise ValueError(f"--out's directory does not exist: {args.out.parent}")
    try:
        done = export_gguf(args.dir, args.out, args.kind, Settings().gguf_python)
    except GgufExportError as e:  # llama.cpp's tools failed on a checkpoint that passed our checks: not bad input
        print(f"nbl: error: {e}", file=sys.stderr)
        return 1
    print(
        json.dumps(done)
        if args.json
        else f"{args.dir} -> {done['path']} ({done['arch']}, {done['type']}, {done['size'] / 2**20:.1f} MiB)"
    )
    return 0
