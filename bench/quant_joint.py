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
    """{scheme: figures} of stock vLLM CPU against transformers on an output's w8a8 and w4a16 copies, and on the
    unquantized output ("none") as the control: quant_serve's greedy agreement, and quant_logprobs' teacher-forced
    perplexity and top-1 on fixed text. Run in the serving venv, measured on these very copies or not at all."""
    slug = f"smollm2_{config.replace(' ', '_').replace('=', '')}"
    made = (out / "w8a8" / "quantization.json").stat().st_mtime
    py, env = str(REPO / ".venv-vllm" / "bin" / "python"), {**os.environ, "VLLM_PLUGINS": ""}
    found: dict[str, dict] = {}
    for s in ("w8a8", "w4a16"):
        done = RESULTS / f"quant_serve_{slug}_{s}.json"
        if not skip and not (done.is_file() and done.stat().st_mtime > made):
            cmd = [
                py,
                "bench/quant_serve.py",
                "--quantized",
                str(out / s),
                "--plain",
                str(out),
                "--name",
                f"{slug}_{s}",
            ]
            subprocess.run(cmd, cwd=REPO, check=True, env=env)
        if done.is_file() and done.stat().st_mtime > made:
            found[s] = {"greedy": json.loads(done.read_text())["agreement"]["vllm_quantized_vs_transformers_quantized"]}
    done = RESULTS / f"quant_logprobs_{slug}.json"
    if not skip and not (done.is_file() and done.stat().st_mtime > made):
        models = [f"--model={s}={out / s if s != 'none' else out}" for s in ("none", "w8a8", "w4a16")]
        cmd = [py, "bench/quant_logprobs.py", *models, "--out", str(done.with_suffix(""))]
        subprocess.run(cmd, cwd=REPO, check=True, env=env)
    if done.is_file() and done.stat().st_mtime > made:
        for r in json.loads(done.read_text())["rows"]:
            pair = r["pairs"]["vllm-bf16 vs hf-bf16"]
            found.setdefault(r["model"], {}).update(
                {"ppl_vllm": r["ppl"]["vllm-bf16"], "ppl_hf": r["ppl"]["hf-bf16"], "top1": pair["top1_same"]}
            )
    return found


def table(rows: list[dict], agree: dict[str, dict]) -> list[str]:
    def cell(x, fmt: str) -> str:
        return "—" if x is None else format(x, fmt)

    lines = [
        "| configuration | model | scheme | WikiText-2 ppl | ARC-Easy acc | weights MB | greedy vLLM = HF "
        "| teacher-forced ppl vLLM / HF | same top-1 |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if "refused" in r:
            lines.append(f"| {r['config']} | {r['model']} | {r['scheme']} | refused | | | | | |")
            continue
        a = (agree.get(r["config"]) or {}).get(r["scheme"], {}) if r["model"] == "NBL" else {}
        greedy = cell(a.get("greedy"), ".1%") if "greedy" in a else ""
        forced = f"{a['ppl_vllm']:.2f} / {a['ppl_hf']:.2f}" if "ppl_vllm" in a else ""
        top1 = cell(a.get("top1"), ".1%") if "top1" in a else ""
        mb = "—" if r.get("bytes") is None else f"{r['bytes'] / 1e6:,.1f}"
        lines.append(
            f"| {r['config']} | {r['model']} | {r['scheme']} | {cell(r['ppl'], '.3f')} | {cell(r['arc_easy'], '.3f')} "
            f"| {mb} | {greedy} | {forced} | {top1} |"
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
        "vLLM's CPU backend does not run FP8. Three comparisons of stock vLLM CPU (VLLM_PLUGINS=, bfloat16) with "
        "transformers (bfloat16) on the same checkpoint: greedy agreement, 3 prompts x 32 tokens, the share of "
        "tokens before the first difference (bench/quant_serve.py); and teacher-forced on the same 8 WikiText-2 "
        "windows x 256 tokens (bench/quant_logprobs.py), the perplexity each gives and the share of positions "
        "where both pick the same top token. The unquantized NBL row is the control.",
        "",
        *table(rows, agree),
        "",
        *(f"Refused: {w}" for w in refused),
        "",
        "Greedy agreement ends at the first near-tie, so it says little (the same kind of copies agreed on 2-23 % "
        "in an earlier run). Teacher-forced, vLLM gives each copy the perplexity transformers gives it within "
        "0.5 %, and for w4a16 the same top token as often as on the unquantized control. w8a8 agrees less, on both "
        "runtimes alike: transformers in bfloat16 differs as much from itself in float32 "
        "(bench/results/quant_logprobs_smollm2.md), and so does the base quantized the same way. Per-token INT8 "
        "activations turn on SmolLM2's activation outliers. w8a8 is SmoothQuant (0.8) then GPTQ, llm-compressor's "
        "INT8 recipe; with GPTQ alone (the run before) NBL + w8a8 was 30.53 (attn) and 35.23 (block), and "
        "base + w8a8 25.20.",
        "GPTQ on the CPU is not bit-reproducible: base + w8a8 measured 24.73 and 24.77 in the two configurations' "
        "runs (the same base and blocks), base + w4a16 34.14 and 34.73.",
        "",
        "Command: `NBL_DATA_DIR=../shared/data .venv/bin/python bench/quant_joint.py` (the vLLM rows need "
        "`make serving-env`).",
        "",
    ]
    (RESULTS / "quant_joint_smollm2.md").write_text("\n".join(md))
    print("\n".join(md))


if __name__ == "__main__":
    main()
