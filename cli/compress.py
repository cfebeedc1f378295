"""`nbl compress`: calibrate, score and linearize a model locally, with no server.

Heavy modules (torch, transformers) are imported inside the command, so `nbl --help` is instant. Its flags
are cli/compress_options.py's (`nbl estimate` takes the same); here they become a Recipe, run, and printed.
"""

from __future__ import annotations

import json
import sys

from cli.compress_options import compress_arguments
from cli.gates import EXIT_QUALITY, gates_from_args
from cli.refine_options import refine_from_args
from cli.selection_options import print_selection, selection_from_args
from nbl import recipe as R
from nbl.selection.score_fields import SCORE_FIELDS


def add_compress(sub) -> None:
    p = sub.add_parser(
        "compress",
        help="calibrate, score and linearize a model; save self-contained checkpoints",
        description="Neural Block Linearization (arXiv 2505.21077): replace the k most linear "
        "attention branches (or whole blocks) with closed-form linear maps.",
    )
    compress_arguments(p)
    p.set_defaults(func=cmd_compress)


def cmd_compress(args) -> int:
    """The job's pipeline (worker/pipeline.py) with the terminal as its sink and --out as its destination:
    the same stages, the fresh-process load check of every output and the card written once, at publish."""
    from cli.console_sink import ConsoleSink
    from cli.eval import eval_spec
    from service.core.settings import Settings
    from worker.engine.loading.hub_access import HubUnreachable
    from worker.eval.report import compress_result, finite, print_table, report
    from worker.gates import QualityFailure
    from worker.pipeline import run
    from worker.publish.in_place import InPlace
    from worker.publish.loadcheck import LoadCheckError
    from worker.run_settings import run_options, run_paths

    if args.max_model_bytes is not None and args.max_model_bytes < 1:
        raise ValueError(f"--max-model-bytes must be positive, got {args.max_model_bytes}")
    if args.eval and args.out is None:
        raise ValueError("--eval evaluates the saved outputs: give --out")
    if (args.max_ppl_increase is not None) != (args.k == []):
        raise ValueError("--k auto and --max-ppl-increase go together: the largest k within that budget")
    if args.host_cache_bytes is not None and args.host_cache_bytes < 0:
        raise ValueError(f"the host cache budget must be a number of bytes, got {args.host_cache_bytes}")
    espec = eval_spec(args) if args.eval else None  # checked before the long part
    if getattr(args, "quantize", None):
        quantizable(args)
    settings = (
        Settings()
    )  # the reader of NBL_* (service/core/settings.py): directories, the defaults of the limits below
    paths = run_paths(settings, args.out, stats_cache=not args.no_cache, eval_cache=not args.no_cache)
    progress = sys.stderr.isatty() or not args.json
    limits = {
        k: v
        for k, v in dict(
            max_model_bytes=args.max_model_bytes,
            host_cache_bytes=args.host_cache_bytes,
            greedy_width=args.greedy_width or None,
        ).items()
        if v is not None
    }  # else NBL_*
    options = run_options(  # the hub retries (NBL_HUB_ATTEMPTS) and load-check timeout as a worker's
        settings,
        devices=args.devices,
        device=args.device,
        dtype=args.dtype,
        batch_size=args.batch_size,
        product_dtype=args.stats_precision,
        fit_check=False,  # the user chose this machine; the engine's own limits still hold
        load_check=not args.no_load_check,
        local_paths=True,
        private_hub=True,
        progress=progress,
        **limits,
    )
    sink = ConsoleSink(verbose=progress)
    try:
        result = run(recipe(args, espec), sink, paths, InPlace(args.out) if args.out is not None else None, options)
    except (LoadCheckError, HubUnreachable) as e:  # our save is broken, or no Hub: exit 1, not a usage error's 2
        print(f"nbl: error: {e}", file=sys.stderr)
        return 1
    except QualityFailure as e:  # every output failed a --gate (the sink printed the checks): nothing published
        print(f"nbl: {e}", file=sys.stderr)
        if args.json:
            print(json.dumps({"gates": sink.gate_checks}, indent=2))
        return EXIT_QUALITY
    view = _json_view(result.compressed.as_dict())
    base = result.evaluation.get("base")
    if result.quantized.outputs:  # each output that passed, once more per scheme in its SCHEME/ folder
        view["quantized"] = quantized_view(result, base)
    view["load_check"] = {f"k{k}": c for k, c in result.checks.items()}  # each output reloaded in a fresh process
    if sink.gate_checks is not None:
        view["gates"] = sink.gate_checks  # {"passed", "checks"}: only the outputs that passed got their card
    results = {k: result.evaluation[f"k{k}"] for k in result.selected if f"k{k}" in result.evaluation}
    if espec is not None:
        view["evaluation"] = {f"k{k}": report(r, base) for k, r in results.items()}  # each as `nbl eval --json`
    view["result"] = compress_result(view, base, results)  # the shape of the API's job `result`
    if args.json:
        print(json.dumps(finite(view), indent=2, allow_nan=False))  # JSON has no Infinity: null
        return 0
    print_compress_table(result.compressed.as_dict(), args.mode)
    for r in results.values():  # base vs each output, as `nbl eval` prints it
        print_table(r, base)
    return 0


def quantizable(args) -> None:
    """--quantize's refusals before the long part: the form, --out (the quantization venv: the pipeline's, at once)."""
    from nbl.outputs.quant_schemes import form_error

    if (why := form_error(args.form or R.FORM, args.mode)) is not None:
        raise ValueError(f"--quantize: {why}")
    if args.out is None:
        raise ValueError("--quantize writes into each saved output's SCHEME/ folder: give --out")


def quantized_view(result, base) -> dict:
    """{"k4": {"w4a16": what quantize did, + "evaluation" with --eval}, "base": {...}}: the pipeline's quantize
    stage (worker/quant/stage.py), each copy's evaluation as `nbl eval --json` reports it against the base."""
    from worker.eval.report import report

    rows = {f"k{k}": by for k, by in result.quantized.outputs.items() if k in result.outputs}
    rows |= {"base": result.quantized.base} if result.quantized.base else {}
    return {
        who: {
            s: {
                **f,
                **({"path": None} if who == "base" else {}),  # the base's copy was removed after its evaluation
                **(
                    {"evaluation": report(result.evaluation[v], base)}
                    if (v := f"{who}+{s}") in result.evaluation
                    else {}
                ),
            }
            for s, f in by.items()
        }
        for who, by in rows.items()
    }


def recipe(args, espec=None) -> R.Recipe:
    """The flags as the same Recipe a job's request becomes (nbl/recipe.py); `espec`: what --eval
    measures (cli/eval.py's EvalSpec of the evaluation flags)."""
    evaluation = R.Evaluation()
    if espec is not None:
        evaluation = R.Evaluation(
            perplexity=espec.perplexity,
            tasks=espec.tasks,
            limit=espec.limit,
            max_tokens=espec.max_tokens,
            speed=espec.speed,
            task_files=espec.task_files,
            suite=espec.suite,
            repeats=espec.repeats,
            batch_tokens=espec.batch_tokens,
        )
    refit, heal = refine_from_args(args, args.form, args.method)
    return R.Recipe(
        model=args.model,
        revision=args.revision,
        calibration=R.Calibration(
            dataset=args.dataset,
            config=args.dataset_config,
            split=args.split,
            text_field=args.text_field,
            num_samples=args.num_samples,
            seq_len=args.seq_len,
            seed=args.seed,
            shuffle=args.shuffle,
        ),
        compression=R.Compression(
            ks=tuple(args.k),
            mode=args.mode,
            method=args.method,
            criterion=args.criterion,
            form=args.form,
            max_ppl_increase=args.max_ppl_increase,
            enforce_budget=getattr(args, "enforce_budget", True),
            refit=refit,
            heal=heal,
        ),
        evaluation=evaluation,
        selection=selection_from_args(args),
        gates=gates_from_args(args, espec),
        # --save-dtype as a job's publish.dtype; none: the outputs in the compute dtype (worker/engine/forms/out_dtype.py)
        publishing=R.Publishing(dtype=getattr(args, "save_dtype", None), quantize=getattr(args, "quantize", None) or ())
        if getattr(args, "quantize", None) or getattr(args, "save_dtype", None)
        else None,
    )


def _json_view(r: dict) -> dict:
    keep = SCORE_FIELDS + ("eligible", "reason")  # form fold: layer 0 is not eligible, and says why
    return {
        "calibration": r["calibration"],
        "scores": [
            {"layer": s["layer"], **{b: {k: s[b][k] for k in keep if k in s[b]} for b in ("attn", "block") if b in s}}
            for s in r["scores"]
        ],
        "outputs": r["outputs"],
        "timings": r["timings"],
        **({"selection": r["selection"]} if r.get("selection") else {}),
    }


def print_compress_table(r: dict, mode: str) -> None:
    cal = r["calibration"]
    src = "cache" if cal["cached"] else f"{cal['seconds']:.1f} s"
    print(
        f"\ncalibration: {cal['num_samples']} x {cal['seq_len']} = {cal['tokens']} tokens ({src}); "
        f"sums {cal['stats_bytes'] / 2**20:.0f} MiB, peak RSS {cal['peak_rss_bytes'] / 2**20:.0f} MiB"
    )
    chosen = {i for o in r["outputs"] for i in o["replaced_layers"]}
    has_loss = any("loss_rise" in s[mode] for s in r["scores"])
    head = f"{'layer':>5} {'cca_bound':>10} {'nmse':>8} {'cosine':>8} {'held_nmse':>9}" + (
        " loss_rise" if has_loss else ""
    )
    print(f"\n{mode} scores (* = replaced in some output)\n{head}")
    for s in r["scores"]:
        m = s[mode]
        if m.get("eligible") is False:  # form fold's layer 0
            print(f"{s['layer']:>4}  not eligible: {m.get('reason')}")
            continue
        held = "-" if m["heldout_nmse"] is None else f"{m['heldout_nmse']:.4f}"
        line = f"{s['layer']:>4}{'*' if s['layer'] in chosen else ' '} {m['cca_bound']:>10.3f} {m['nmse']:>8.4f} {m['cosine']:>8.4f} {held:>9}"
        if has_loss:
            line += f" {m['loss_rise']:>9.4f}"
        print(line)
    print()
    if r.get("selection"):
        print_selection(r["selection"])
    for o in r["outputs"]:
        print(
            f"k={o['k']:<3} {o['mode']}/{o['method']}/{o['criterion']} form {o.get('form', R.FORM)}: layers "
            f"{o['replaced_layers']} -> {o['path']}  (runs in: {', '.join(o.get('runs_in') or [])})"
        )
        if o.get("refit"):
            print(
                f"      refit (sequential): {o['refit']['seconds']:.1f} s{' (cached)' if o['refit'].get('cached') else ''}"
            )
        if o.get("heal"):
            h = o["heal"]
            print(
                f"      heal: {h['tokens']:,} tokens, {h['steps']} steps, {h['seconds']:.1f} s; held-out ppl "
                f"{h['perplexity_before']:.3f} -> {h['perplexity_after']:.3f}"
                + (
                    f"; guard (selection data) ppl {h['guard_perplexity_before']:.3f} -> {h['guard_perplexity_after']:.3f}"
                    if h.get("guard_perplexity_before") is not None
                    else ""
                )
                + ("" if h["kept"] else " (not kept)")
            )
