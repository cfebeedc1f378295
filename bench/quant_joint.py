"""NBL and quantization measured jointly (issue 39 item 5): SmolLM2-135M, attn k=4 and fold block k=2, each x {none,
fp8-dynamic, w8a8, w4a16}: WikiText-2 perplexity, ARC-Easy accuracy, weights on disk, and for w8a8 and w4a16 the
greedy agreement of stock vLLM CPU (no plugin) with transformers on the same quantized checkpoint.

Each configuration is one `nbl compress ... --quantize fp8-dynamic,w8a8,w4a16 --eval` run: the pipeline's quantize
stage writes each copy into the output's SCHEME/ folder and quantizes the base alike (GPTQ on the run's own
calibration blocks), then the evaluation measures base, base + scheme, NBL and NBL + scheme on the same data. A
configuration whose form cannot be quantized is run unquantized and its quantized cells say why.

    NBL_DATA_DIR=../shared/data .venv/bin/python bench/quant_joint.py [--work DIR] [--skip-vllm]

Writes bench/results/quant_joint_smollm2.json and .md (the vLLM rows come from bench/quant_serve.py, run in the
serving venv: quant_serve_smollm2_fold_{attn_k4,block_k2}_{w8a8,w4a16}.json).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
SCHEMES = ("fp8-dynamic", "w8a8", "w4a16")
CAL = ["--dataset", "c4", "--num-samples", "16", "--seq-len", "512", "--save-dtype", "auto"]  # bfloat16, as a job
EVAL = ["--eval", "--perplexity", "wikitext2", "--max-tokens", "8192", "--tasks", "arc_easy", "--limit", "300"]
CONFIGS = {  # name -> nbl compress flags
    "fold attn k=4": ["--mode", "attn", "--form", "fold", "--k", "4"],  # a DeciLM, attention no_op
    "fold block k=2": ["--mode", "block", "--form", "fold", "--k", "2"],
}


def nbl(*args: str) -> dict:
    cmd = [sys.executable, "-m", "cli.main", *args, "--json"]
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    if run.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({run.returncode}):\n{run.stderr[-3000:]}")
    return json.loads(run.stdout)


def smollm2_gguf() -> str:
    sys.path.insert(0, str(REPO / "tests"))
    from testkit.models import smollm2_gguf as find

    return str(find())


def figures(ev: dict | None) -> dict:
    ev = ev or {}
    return {
        "ppl": ((ev.get("perplexity") or {}).get("wikitext2") or {}).get("ppl"),
        "arc_easy": ((ev.get("tasks") or {}).get("arc_easy") or {}).get("acc"),
    }


def size(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).glob("*.safetensors"))


def run_config(name: str, flags: list[str], base: Path, work: Path) -> list[dict]:
    from nbl.outputs.quant_schemes import form_error

    out = work / name.replace(" ", "-").replace("=", "")
    form = flags[flags.index("--form") + 1] if "--form" in flags else "nbl"
    why = form_error(form, flags[flags.index("--mode") + 1])
    quant = [] if why else ["--quantize", ",".join(SCHEMES)]
    t = time.time()
    view = nbl("compress", "--model", str(base), *flags, *CAL, *EVAL, *quant, "--out", str(out))
    seconds = round(time.time() - t, 1)
    [k] = [o["k"] for o in view["outputs"]]
    ev_base = view["result"]["base"]
    rows = [
        {"config": name, "model": "base", "scheme": "none", **figures(ev_base), "bytes": size(base)},
        {"config": name, "model": "NBL", "scheme": "none", **figures(view["evaluation"][f"k{k}"]), "bytes": size(out)},
    ]
    for s in SCHEMES:
        if why:
            rows += [{"config": name, "model": m, "scheme": s, "refused": why} for m in ("base", "NBL")]
            continue
        for who, model in (("base", "base"), (f"k{k}", "NBL")):
            q = view["quantized"][who][s]
            rows.append(
                {
                    "config": name,
                    "model": model,
                    "scheme": s,
                    **figures(q.get("evaluation")),
                    "bytes": q["bytes"],
                    "calibration_tokens": q["calibration_tokens"],
                    "unquantized": q["unquantized"],
                    "llmcompressor": q["llmcompressor"],
                }
            )
    for r in rows:
        r["seconds_of_run"] = seconds
    return rows


def rows_from_card(name: str, out: Path, base: Path) -> list[dict]:
    """A configuration's rows read back from its output's model card (the "Quantized" section's four rows per
    scheme) and its folders, for a run whose --json was lost (--from-cards): base + scheme's size is not on it."""

    text = (out / "README.md").read_text()
    rows, seen = [], set()
    for s in SCHEMES:
        part = text.split(f"### {s}:", 1)[1].split("\n#", 1)[0] if f"### {s}:" in text else ""
        table = [
            line.strip("|").split("|") for line in part.splitlines() if line.startswith("| ") and "---" not in line
        ]
        if not table:
            continue
        head = [h.strip() for h in table[0]]
        for cells in table[1:]:
            label, values = cells[0].strip(), dict(zip(head[1:], (c.strip() for c in cells[1:])))
            num = lambda v: None if v in (None, "—") else float(v)  # noqa: E731
            model, scheme = (
                ("base", "none") if label == "base" else ("NBL", "none") if label == "NBL" else label.split(" + ")
            )
            if (model, scheme) in seen:
                continue
            seen.add((model, scheme))
            path = (base if model == "base" else out) if scheme == "none" else (out / s if model == "NBL" else None)
            q = json.loads((out / s / "quantization.json").read_text()) if scheme != "none" else {}
            rows.append(
                {
                    "config": name,
                    "model": model,
                    "scheme": scheme,
                    "ppl": num(values.get("perplexity/wikitext2")),
                    "arc_easy": num(values.get("tasks/arc_easy")),
                    "bytes": size(path) if path is not None else None,
                    **({"calibration_tokens": q["calibration_tokens"], "unquantized": q["unquantized"],
                        "llmcompressor": q["llmcompressor"]} if q else {}),
                }
            )  # fmt: skip
    order = {("base", "none"): 0, ("NBL", "none"): 1}
    return sorted(
        rows,
        key=lambda r: (
            order.get((r["model"], r["scheme"]), 2),
            SCHEMES.index(r["scheme"]) if r["scheme"] in SCHEMES else -1,
            r["model"] != "base",
        ),
    )


def vllm_agreement(out: Path, config: str, skip: bool) -> dict[str, dict]:
    """{scheme: quant_serve's figures} for w8a8 and w4a16 of an output (the serving venv runs vLLM)."""
    found = {}
    for s in ("w8a8", "w4a16"):
        name = f"smollm2_{config.replace(' ', '_').replace('=', '')}_{s}"
        done = RESULTS / f"quant_serve_{name}.json"
        fresh = done.is_file() and done.stat().st_mtime > (out / s / "quantization.json").stat().st_mtime
        if not skip and not fresh:  # measured on this very copy already: kept
            py = REPO / ".venv-vllm" / "bin" / "python"
            cmd = [str(py), "bench/quant_serve.py", "--quantized", str(out / s), "--plain", str(out), "--name", name]
            subprocess.run(cmd, cwd=REPO, check=True, env={**os.environ, "VLLM_PLUGINS": ""})
        if done.is_file() and done.stat().st_mtime > (out / s / "quantization.json").stat().st_mtime:
            found[s] = json.loads(done.read_text())["agreement"]  # never another copy's measurement
    return found


def table(rows: list[dict], agree: dict[str, dict]) -> list[str]:
    def cell(x, fmt: str) -> str:
        return "—" if x is None else format(x, fmt)

    lines = [
        "| configuration | model | scheme | WikiText-2 ppl | ARC-Easy acc | weights MB | vLLM CPU = transformers |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "refused" in r:
            lines.append(f"| {r['config']} | {r['model']} | {r['scheme']} | refused | | | |")
            continue
        a = (agree.get(r["config"]) or {}).get(r["scheme"]) if r["model"] == "NBL" else None
        vllm = cell(a and a["vllm_quantized_vs_transformers_quantized"], ".1%") if a else ""
        mb = "—" if r.get("bytes") is None else f"{r['bytes'] / 1e6:,.1f}"
        lines.append(
            f"| {r['config']} | {r['model']} | {r['scheme']} | {cell(r['ppl'], '.3f')} | {cell(r['arc_easy'], '.3f')} "
            f"| {mb} | {vllm} |"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", type=Path, default=REPO / ".bench-quant")
    ap.add_argument("--skip-vllm", action="store_true", help="use the quant_serve results already in bench/results")
    ap.add_argument("--from-cards", action="store_true", help="read the runs already in --work from their cards")  # noqa: E501
    ap.add_argument("--configs", default=",".join(CONFIGS), help="which configurations, comma-separated")
    a = ap.parse_args()
    a.work.mkdir(parents=True, exist_ok=True)
    base = Path(nbl("import-gguf", smollm2_gguf(), "--name", "smollm2-quant-bench")["path"])
    configs = [c for c in a.configs.split(",") if c]
    rows = []
    for name in configs:
        out = a.work / name.replace(" ", "-").replace("=", "")
        carded = a.from_cards and (out / "README.md").is_file()  # a configuration without a card yet is run
        rows += rows_from_card(name, out, base) if carded else run_config(name, CONFIGS[name], base, a.work)
    agree = {c: vllm_agreement(a.work / c.replace(" ", "-").replace("=", ""), c, a.skip_vllm) for c in configs}
    res = {"rows": rows, "vllm": agree, "calibration": CAL, "evaluation": EVAL, "base": str(base.name)}
    (RESULTS / "quant_joint_smollm2.json").write_text(json.dumps(res, indent=2) + "\n")
    refused = sorted({r["refused"] for r in rows if "refused" in r})
    md = [
        "# NBL and quantization, measured jointly: SmolLM2-135M-Instruct",
        "",
        "One `nbl compress --quantize fp8-dynamic,w8a8,w4a16 --eval` run per configuration: calibration C4 16 x 512 "
        "(GPTQ fits on the same blocks), WikiText-2 test (first 8,192 tokens), ARC-Easy (first 300 questions). "
        "The base is `nbl import-gguf` of the Q4_1 GGUF (bfloat16); the outputs are saved in bfloat16, as a job's "
        "(`--save-dtype auto`). Base + scheme is the base quantized the same way. "
        "vLLM CPU = transformers: greedy agreement of stock vLLM CPU (VLLM_PLUGINS=, bfloat16) with transformers on "
        "the same quantized checkpoint, 3 prompts x 32 tokens (bench/quant_serve.py); vLLM's CPU backend does not "
        "run FP8.",
        "",
        *table(rows, agree),
        "",
        *(f"Refused: {w}" for w in refused),
        "",
        "Agreement is the share of greedy tokens before the first difference, so one early tie-break ends a prompt; "
        "these copies were made from bfloat16 outputs of a Q4_1-derived base. A w4a16 copy made from a float32 "
        "output (32 x 256 calibration, issue 39's first run) agreed on 71.9 %: the gap is not explained yet "
        "(bench/quant_serve.py's texts are coherent on both sides; a plain-vs-plain control is next).",
        "GPTQ on the CPU is not bit-reproducible across runs: base + w8a8 measured 25.20 and 25.28 in the two runs.",
        "",
        "Command: `NBL_DATA_DIR=../shared/data .venv/bin/python bench/quant_joint.py` (the vLLM rows need "
        "`make serving-env`).",
        "",
    ]
    (RESULTS / "quant_joint_smollm2.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
