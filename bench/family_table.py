"""One real model's NBL table: criteria (cca, cosine, nmse, greedy) in attn mode and cca/cosine in block mode, with
perplexity and KV-cache bytes per token, from one calibration. Written for Gemma 3 270M beside SmolLM2's tables.

    .venv/bin/python bench/family_table.py --model PATH --name gemma3-270m [--num-samples 32] [--seq-len 256]
        [--selection-samples 8] [--max-tokens 4094] [--window 2048] [--attn-k 4] [--block-k 2]

PATH: a model directory or a GGUF file (converted under NBL_MODELS_DIR as a job would). One calibration (C4,
--num-samples x --seq-len); the fixed criteria's layer sets from its scores; greedy measured on WikiText-2
*validation* (--selection-samples blocks of --seq-len), never the test split evaluated; perplexity on the first
--max-tokens tokens of WikiText-2 raw test in --window windows, each opening with what the tokenizer adds (Gemma's
<bos>). Forms: nbl (the only one every family has; each refused form is listed with its reason). KV bytes per
token: 2 (K and V) x kv_heads x head_dim x 2 bytes (bf16) per kept attention layer; a sliding-window layer holds at
most its window's tokens, so its share is listed apart. Writes --out's .json as it goes, then .md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from nbl.outputs.forms import family_error  # noqa: E402
from service.core.settings import Settings  # noqa: E402
from worker.engine.calibration.data import DatasetSpec  # noqa: E402
from worker.engine.calibration.stage import calibration_stage, layer_source  # noqa: E402
from worker.engine.config import CompressConfig  # noqa: E402
from worker.engine.forms.surgery import Plan, replaced  # noqa: E402
from worker.engine.loading.load import load_model  # noqa: E402
from worker.engine.scoring.stage import fit_maps, score_stage  # noqa: E402
from worker.engine.selection.auto_k import Chooser  # noqa: E402
from worker.engine.selection.criteria import choose  # noqa: E402
from worker.engine.selection.set_loss import SetLoss  # noqa: E402
from worker.engine.selection.stage import selection_data  # noqa: E402
from worker.eval.perplexity import corpus_text, perplexity  # noqa: E402

FIXED = ("cca", "cosine", "nmse")


def kv_bytes(config, attention_layers: list[int]) -> dict:
    """Per token, bf16: all kept attention layers, and the share of the sliding-window ones (capped at the window)."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_layer = 2 * config.num_key_value_heads * head_dim * 2
    types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    sliding = sum(types[i] == "sliding_attention" for i in attention_layers)
    return {"per_token": per_layer * len(attention_layers), "sliding_layers": sliding, "per_layer": per_layer}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--num-samples", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--selection-samples", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=4094)
    ap.add_argument("--window", type=int, default=2048)
    ap.add_argument("--attn-k", type=int, default=4)
    ap.add_argument("--block-k", type=int, default=2)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    out_path = args.out or HERE / "results" / f"family_table_{args.name}"
    os.environ.setdefault("NBL_DATA_DIR", str(HERE.parent.parent / "shared" / "data"))
    settings = Settings()
    out: dict = {
        "model": args.name,
        "calibration": f"c4 {args.num_samples}x{args.seq_len}",
        "eval": f"WikiText-2 raw test, first {args.max_tokens} tokens, window {args.window}",
        "command": " ".join(["python", *sys.argv]),
        "machine": f"{os.cpu_count()} CPUs, float32",
        "rows": [],
    }

    def save() -> None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.with_suffix(".json").write_text(json.dumps(out, indent=1) + "\n")

    t0 = time.perf_counter()
    lm = load_model(args.model, dtype="float32", device="cpu", models_dir=settings.models_dir, home=settings.home)
    config = lm.model.config
    out["family"], out["layers"] = lm.family, config.num_hidden_layers
    out["refused"] = {
        f"{form} {mode}": why
        for form, mode in (("fold", "block"), ("linear", "attn"), ("fold", "attn"))
        if (why := family_error(form, mode, lm.family, config.to_dict()))
    }
    cfg = CompressConfig(
        model=args.name,
        dataset=DatasetSpec("c4"),
        ks=[args.attn_k],
        num_samples=args.num_samples,
        seq_len=args.seq_len,
        criterion="auto",
        stats_dir=settings.stats_dir,
        data_dir=settings.data_dir,
    )
    cal = calibration_stage(cfg, lm)
    scores = cal.scores or score_stage(cal.stats)
    out["calibration_s"] = round(time.perf_counter() - t0, 1)
    text = corpus_text("wikitext2", settings.data_dir)
    every = list(range(config.num_hidden_layers))

    def row(mode: str, criterion: str, layers: list[int], seconds: float | None = None) -> None:
        t = time.perf_counter()
        maps = fit_maps(cal.stats, mode, layers) if layers else {}
        with replaced(lm.model, Plan(mode if layers else "attn", "nbl", tuple(layers)), maps):
            r = perplexity(lm.model, lm.tokenizer, text, window=args.window, max_tokens=args.max_tokens, progress=False)
        kept = [i for i in every if i not in layers]
        out["rows"].append(
            {
                "mode": mode,
                "k": len(layers),
                "criterion": criterion,
                "layers": sorted(layers),
                "ppl": r["ppl"],
                "tokens": r["tokens"],
                "kv": kv_bytes(config, kept),
                "eval_s": round(time.perf_counter() - t, 1),
                **({"selection_s": seconds} if seconds is not None else {}),
            }
        )
        print(out["rows"][-1], flush=True)
        save()

    row("base", "-", [])
    for c in FIXED:
        row("attn", c, choose(scores, "attn", c, args.attn_k))
    scfg = replace(
        cfg, selection=DatasetSpec("wikitext2", split="validation"), selection_samples=args.selection_samples
    )
    t = time.perf_counter()
    blocks, _, split = selection_data(scfg, lm, cal)
    loss = SetLoss(
        layer_source(lm),
        blocks,
        "attn",
        "nbl",
        lambda i: fit_maps(cal.stats, "attn", [i], split=split)[i],
        batch_size=cal.meta.get("batch_size", 1),
    )
    greedy = Chooser(scores, "attn", "greedy", loss, loss.base, scfg.greedy_width).greedy.layers(args.attn_k)
    row("attn", "greedy", list(greedy), round(time.perf_counter() - t, 1))
    # block mode: its own calibration (a block's sums are the whole layer's input and output)
    cal = calibration_stage(replace(cfg, mode="block", ks=[args.block_k]), lm)
    scores = cal.scores or score_stage(cal.stats)
    for c in ("cca", "cosine"):
        row("block", c, choose(scores, "block", c, args.block_k))
    out["total_s"] = round(time.perf_counter() - t0, 1)
    save()
    out_path.with_suffix(".md").write_text(markdown(out))


def markdown(out: dict) -> str:
    base = out["rows"][0]
    lines = [
        f"# {out['model']} ({out['family']}, {out['layers']} layers): NBL by criterion, form nbl",
        "",
        f"Command: `{out['command']}` ({out['machine']}; calibration {out['calibration']}, {out['calibration_s']} s).",
        f"Perplexity: {out['eval']}, each window opening with the tokenizer's prefix. KV: bf16 bytes per token of",
        "the kept attention layers (a sliding-window layer holds at most its window's tokens).",
        "",
        "| mode | k | criterion | layers | WikiText-2 ppl | vs base | KV bytes/token (sliding layers) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in out["rows"]:
        rise = f"{100 * (r['ppl'] / base['ppl'] - 1):+.1f}%" if r["k"] else "-"
        kv = f"{r['kv']['per_token']:,} ({r['kv']['sliding_layers']})"
        lines.append(f"| {r['mode']} | {r['k']} | {r['criterion']} | {r['layers']} | {r['ppl']:.2f} | {rise} | {kv} |")
    lines += ["", "Forms this family refuses, with the reason:", ""]
    lines += [f"- {form}: {why}" for form, why in out["refused"].items()] or ["- none"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
