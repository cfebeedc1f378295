"""One real model's NBL table by criterion: cca, cosine, nmse, and the measured greedy and auto, in attn and block
mode, for lists of k, with perplexity, KV-cache bytes per token and what the measured criteria cost, from one
calibration per mode. Written for Gemma 3 270M beside SmolLM2's tables; bench/default_criterion.py joins them.

    .venv/bin/python bench/family_table.py --model PATH --name gemma3-270m [--num-samples 32] [--seq-len 256]
        [--selection-samples 8] [--max-tokens 4094] [--window 2048] [--attn-k 4 8] [--block-k 2]
        [--measured attn block]

PATH: a model directory or a GGUF file (converted under NBL_MODELS_DIR as a job would). One calibration per mode
(C4, --num-samples x --seq-len); the fixed criteria's layer sets from its scores; greedy and auto (the lowest
selection loss of the cca, cosine, nmse and greedy sets, as a job's `criterion: auto`) measured on WikiText-2
*validation* (--selection-samples blocks of --seq-len), never the test split evaluated, in the modes of
--measured (greedy is nested: its k=8 extends its k=4); `selection_s` is the time from the start of that mode's
selection up to that k, `peak_rss_mb` the process's peak resident memory so far. Perplexity on the first
--max-tokens tokens of WikiText-2 raw test in --window windows, each opening with what the tokenizer adds
(Gemma's <bos>); a set already evaluated is not evaluated again. Forms: nbl (the only one every family has; each
refused form is listed with its reason). KV bytes per token: 2 (K and V) x kv_heads x head_dim x 2 bytes (bf16)
per kept attention layer; a sliding-window layer holds at most its window's tokens, so its share is listed apart.
Writes --out's .json as it goes, then .md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
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


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux: KiB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--num-samples", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--selection-samples", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=4094)
    ap.add_argument("--window", type=int, default=2048)
    ap.add_argument("--attn-k", type=int, nargs="*", default=[4])
    ap.add_argument("--block-k", type=int, nargs="*", default=[2])
    ap.add_argument("--measured", nargs="*", choices=("attn", "block"), default=["attn", "block"])
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    out_path = args.out or HERE / "results" / f"family_table_{args.name}"
    os.environ.setdefault("NBL_DATA_DIR", str(HERE.parent.parent / "shared" / "data"))
    settings = Settings()
    out: dict = {
        "model": args.name,
        "calibration": f"c4 {args.num_samples}x{args.seq_len}",
        "selection": f"wikitext2 validation {args.selection_samples}x{args.seq_len}",
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
        ks=[4],
        num_samples=args.num_samples,
        seq_len=args.seq_len,
        criterion="auto",
        stats_dir=settings.stats_dir,
        data_dir=settings.data_dir,
    )
    text = corpus_text("wikitext2", settings.data_dir)
    every = list(range(config.num_hidden_layers))
    evaluated: dict[tuple, dict] = {}  # (mode, layers) -> the perplexity result, so a set shared by criteria runs once

    def row(mode: str, criterion: str, layers: list[int], stats, **extra) -> None:
        t = time.perf_counter()
        key = (mode, tuple(sorted(layers)))
        if key not in evaluated:
            maps = fit_maps(stats, mode, layers) if layers else {}
            with replaced(lm.model, Plan(mode if layers else "attn", "nbl", tuple(layers)), maps):
                evaluated[key] = perplexity(
                    lm.model, lm.tokenizer, text, window=args.window, max_tokens=args.max_tokens, progress=False
                )
        r = evaluated[key]
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
                "peak_rss_mb": peak_rss_mb(),
                **extra,
            }
        )
        print(out["rows"][-1], flush=True)
        save()

    def table(mode: str, ks: list[int]) -> None:
        """One calibration for the mode (a block's sums are the whole layer's input and output), then its rows."""
        t = time.perf_counter()
        cal = calibration_stage(replace(cfg, mode=mode, ks=ks), lm)
        out.setdefault("calibration_s", {})[mode] = round(time.perf_counter() - t, 1)
        scores = cal.scores or score_stage(cal.stats)
        if not evaluated:
            row("base", "-", [], cal.stats)
        for k in ks:
            for c in FIXED:
                row(mode, c, choose(scores, mode, c, k), cal.stats)
        if mode not in args.measured:
            return
        t = time.perf_counter()
        scfg = replace(
            cfg,
            mode=mode,
            selection=DatasetSpec("wikitext2", split="validation"),
            selection_samples=args.selection_samples,
        )
        blocks, _, split = selection_data(scfg, lm, cal)
        loss = SetLoss(
            layer_source(lm),
            blocks,
            mode,
            "nbl",
            lambda i: fit_maps(cal.stats, mode, [i], split=split)[i],
            batch_size=cal.meta.get("batch_size", 1),
        )
        chooser = Chooser(scores, mode, "auto", loss, loss.base, scfg.greedy_width)
        for k in ks:
            layers, winner = chooser.layers(k)  # measures cca, cosine, nmse and greedy's sets; the lowest loss wins
            seconds = round(time.perf_counter() - t, 1)
            sel = {x["criterion"]: x["heldout_ppl"] for x in chooser.tried if x["k"] == k}
            cost = {"selection_s": seconds, "sets_measured": len(loss.rows), "layer_passes": loss.layer_passes}
            row(mode, "greedy", chooser.greedy.layers(k), cal.stats, **cost, selection_ppl=sel)
            row(mode, "auto", layers, cal.stats, **cost, selection_ppl=sel, winner=winner)

    if args.attn_k:
        table("attn", args.attn_k)
    if args.block_k:
        table("block", args.block_k)
    out["total_s"] = round(time.perf_counter() - t0, 1)
    save()
    out_path.with_suffix(".md").write_text(markdown(out))


def markdown(out: dict) -> str:
    base = out["rows"][0]
    cal = ", ".join(f"{m} {s} s" for m, s in out["calibration_s"].items())
    lines = [
        f"# {out['model']} ({out['family']}, {out['layers']} layers): NBL by criterion, form nbl",
        "",
        f"Command: `{out['command']}` ({out['machine']}; calibration {out['calibration']}: {cal}; "
        f"greedy and auto on {out['selection']}; {out['total_s']} s in all).",
        f"Perplexity: {out['eval']}, each window opening with the tokenizer's prefix. KV: bf16 bytes per token of",
        "the kept attention layers (a sliding-window layer holds at most its window's tokens). Selection s: from the",
        "start of the mode's selection up to that k (greedy is nested); auto's winner in brackets.",
        "",
        "| mode | k | criterion | layers | WikiText-2 ppl | vs base | KV bytes/token (sliding layers) | selection s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in out["rows"]:
        rise = f"{100 * (r['ppl'] / base['ppl'] - 1):+.1f}%" if r["k"] else "-"
        kv = f"{r['kv']['per_token']:,} ({r['kv']['sliding_layers']})"
        crit = f"auto ({r['winner']})" if "winner" in r else r["criterion"]
        sel = r.get("selection_s", "-")
        lines.append(f"| {r['mode']} | {r['k']} | {crit} | {r['layers']} | {r['ppl']:.2f} | {rise} | {kv} | {sel} |")
    lines += ["", "Forms this family refuses, with the reason:", ""]
    lines += [f"- {form}: {why}" for form, why in out["refused"].items()] or ["- none"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
