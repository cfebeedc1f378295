"""`nbl eval`: perplexity, lm-eval tasks and speed of a model, beside its base when there is one.

Wire with `add_eval(sub)` next to `add_compress(sub)` in cli/compress.py. Heavy modules are imported
inside the command, so `nbl --help` stays instant.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

log = logging.getLogger(__name__)


def _names(text: str) -> list[str]:
    names = [x.strip() for x in text.split(",") if x.strip()]
    if not names:
        raise argparse.ArgumentTypeError("give at least one name")
    return names


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def add_eval(sub) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate a model (perplexity, lm-eval tasks, speed), beside its base",
        description="Evaluate a model or a compressed output: perplexity, lm-eval multiple-choice tasks "
        "(offline, from NBL_DATA_DIR or the local Hugging Face cache), the paper's task suite, your own "
        "JSONL task, and inference speed; with a base model, "
        "one side-by-side report with deltas.",
    )
    p.add_argument(
        "--model", required=True, help="Hub repo id, checkpoint directory, .gguf file, or `nbl compress` output"
    )
    p.add_argument("--revision", help="Hub revision of --model")
    p.add_argument(
        "--base",
        help="base model to compare with (default: the one a compressed output records, "
        "if it is a local path); `none` for no comparison",
    )
    p.add_argument("--base-revision", help="Hub revision of --base")
    p.add_argument("--base-params", type=_positive, help="non-embedding parameters of the base, for sparsity")
    add_eval_options(p)
    p.add_argument("--dtype", default="auto", help="auto (float32 on CPU, bfloat16 on GPU), float32, bfloat16, float16")
    p.add_argument("--device", default="auto")
    p.add_argument(
        "--devices",
        metavar="LIST",
        help="a model larger than the first of these is spread over them "
        "with device_map=auto, the rest offloaded (e.g. cuda:0,cuda:1; default: every visible GPU)",
    )
    p.add_argument(
        "--threads",
        type=_positive,
        help="CPU threads for torch (default: torch's choice; on a busy machine 1 can be much faster than several)",
    )
    p.add_argument("--no-cache", action="store_true", help="re-evaluate the base even if its result is cached")
    p.add_argument("--out", type=Path, help="also write the full JSON report to this file")
    p.add_argument(
        "--card",
        action="store_true",
        help="rewrite the model card (README.md) of an `nbl compress` "
        "output given as --model with these results (model-index and the before/after table)",
    )
    p.add_argument("--json", action="store_true", help="print the JSON report on stdout")
    p.set_defaults(func=cmd_eval)


def add_eval_options(p) -> None:
    """What to measure: shared by `nbl eval` and `nbl compress --eval`."""
    p.add_argument(
        "--perplexity",
        type=_names,
        default=None,
        metavar="CORPORA",
        help="comma-separated: wikitext2, c4, or text files (default wikitext2 when nothing else is asked)",
    )
    p.add_argument("--max-tokens", type=_positive, help="score only the first N tokens of each perplexity corpus")
    p.add_argument(
        "--tasks",
        type=_names,
        default=[],
        metavar="TASKS",
        help="comma-separated: arc_easy, arc_challenge, hellaswag, boolq, openbookqa, lambada_openai, mmlu, "
        "or any lm-eval task whose data is in the local Hugging Face cache (e.g. winogrande)",
    )
    p.add_argument(
        "--task-file",
        nargs="+",
        action="extend",
        default=[],
        metavar="FILE",
        help='JSONL of {"context", "choices", "label"} or of {"contexts", "continuation", "label"} '
        "(one form per file); reported under the file stem",
    )
    # A name, checked when the command runs (worker/eval/benchmarks/suite.py): building the parser imports no
    # worker code, so `nbl serve` starts the API without the worker package.
    p.add_argument(
        "--suite",
        metavar="NAME",
        help="the tasks a paper averages (paper: the NBL paper's eight), "
        "those whose data is here; reports their average and names the tasks skipped",
    )
    p.add_argument("--limit", type=_positive, help="first N documents of each task (per subject for mmlu)")
    p.add_argument("--speed", action="store_true", help="prefill/decode tokens/s, KV-cache bytes, sparsity")
    p.add_argument("--repeats", type=_positive, default=3, help="timed repeats per speed figure (median; default 3)")
    p.add_argument("--batch-tokens", type=_positive, default=2048, help="tokens per forward pass when scoring tasks")


def eval_spec(args):
    """The EvalSpec the options of add_eval_options ask for (wikitext2 perplexity when they ask nothing),
    checked before any model is loaded."""
    from worker.eval.evaluate import EvalSpec

    spec = EvalSpec(
        perplexity=tuple(args.perplexity or ()),
        tasks=tuple(args.tasks),
        task_files=tuple(args.task_file),
        limit=args.limit,
        max_tokens=args.max_tokens,
        suite=args.suite,
        speed=args.speed,
        repeats=args.repeats,
        batch_tokens=args.batch_tokens,
    )
    if spec.empty():
        spec = EvalSpec(perplexity=("wikitext2",), max_tokens=args.max_tokens, batch_tokens=args.batch_tokens)
    for f in spec.task_files:
        if not Path(f).expanduser().is_file():
            raise ValueError(f"task file not found: {f}")
    names = [*spec.tasks, *spec.suite_only(), *(Path(f).stem for f in spec.task_files)]
    if len(set(names)) != len(names):
        raise ValueError(f"two tasks would report under one name: {sorted(n for n in names if names.count(n) > 1)}")
    return spec


def _base_source(args) -> tuple[str | None, str | None]:
    """(base to compare with, the fingerprint `nbl compress` recorded for it, if that is where it came from)."""
    from worker.eval.compressed import is_compressed_dir, recorded_base

    if args.base:
        return (None if args.base.lower() == "none" else args.base), None
    recorded = recorded_base(args.model) if is_compressed_dir(args.model) else None
    if recorded is None:
        return None, None
    if Path(recorded[0]).expanduser().exists():
        return recorded
    log.warning("base %s recorded by the compressed model is not a local path; pass --base to compare", recorded[0])
    return None, None


def cmd_eval(args) -> int:
    from service.core.settings import Settings
    from worker.engine.devices import visible
    from worker.eval.compressed import is_compressed_dir, load_for_eval
    from worker.eval.evaluate import evaluate_cached, evaluate_model
    from worker.eval.report import print_table, report

    spec = eval_spec(args)
    settings = Settings()  # NBL_DATA_DIR, NBL_MODELS_DIR, NBL_HOME, NBL_MAX_MODEL_BYTES
    where = dict(
        max_bytes=settings.max_model_bytes,
        models_dir=settings.models_dir,
        home=settings.home,
        devices=visible(args.devices, args.device),
    )  # over which a model larger than one is spread
    if args.card and not is_compressed_dir(args.model):
        raise ValueError("--card rewrites the card of an `nbl compress` output: give its directory as --model")
    progress = sys.stderr.isatty()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    base_result, base_params = None, args.base_params
    base_source, recorded_fingerprint = _base_source(args)
    if base_source is not None:
        base = load_for_eval(base_source, args.base_revision, args.dtype, args.device, **where)
        if recorded_fingerprint and base.fingerprint != recorded_fingerprint:
            log.warning(
                "base %s is not the checkpoint this model was compressed from (fingerprint differs)", base_source
            )
        base_result = evaluate_cached(
            base, spec, use_cache=not args.no_cache, progress=progress, data_dir=settings.data_dir, home=settings.home
        )
        base_params = base_params or base_result["params"]["non_embedding_params"]
        del base
    lm = load_for_eval(args.model, args.revision, args.dtype, args.device, **where)
    result = evaluate_model(lm, spec, base_non_embedding=base_params, progress=progress, data_dir=settings.data_dir)

    full = report(result, base_result)
    if args.card:
        write_eval_card(Path(args.model), result, base_result, spec.limit, spec.max_tokens)
    if args.out:
        args.out.write_text(json.dumps(full, indent=2, allow_nan=False) + "\n")
    if args.json:
        print(json.dumps(full, indent=2, allow_nan=False))  # report() made it finite: never Infinity
    else:
        print_table(result, base_result)
    return 0


def write_eval_card(
    path: Path, result: dict, base_result: dict | None, limit: int | None = None, max_tokens: int | None = None
) -> None:
    """The output's card, rewritten with this evaluation (the same card a job publishes); an evaluation cut
    short by limit or max_tokens says how much it scored (worker/eval/truncation.py)."""
    from worker.engine.forms.saving import SCORES_FILE
    from worker.eval.truncation import scored
    from worker.eval_stage import flatten
    from worker.publish.card import CardInfo, write_card

    metrics = {"base": flatten(base_result) if base_result else {}, "compressed": flatten(result)}
    cut = scored({"base": metrics["compressed"]}, limit, max_tokens)  # the output's own counts
    write_card(path, CardInfo(report=json.loads((path / SCORES_FILE).read_text()), metrics=metrics, scored=cut))
