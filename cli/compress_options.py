"""`nbl compress`'s flags, apart from the command (cli/compress.py, which turns them into a Recipe) because
`nbl estimate` takes the very same ones (cli/estimate.py). The evaluation's, the gates', the selection's and
the refinement's flags come from their own modules. Argparse wiring only: torch loads inside the commands.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cli.eval import add_eval_options
from cli.gates import add_gate_option
from cli.refine_options import add_refine_options
from cli.selection_options import add_selection_options
from nbl import recipe as R
from nbl.outputs.forms import FORMS
from nbl.outputs.quant_schemes import SCHEMES
from nbl.selection.score_fields import CRITERIA, MEASURED


def schemes_arg(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    bad = [n for n in names if n not in SCHEMES]
    if not names or bad:
        raise argparse.ArgumentTypeError(f"{', '.join(bad) or text!r}: schemes are {', '.join(SCHEMES)}")
    return names


def _ks(text: str) -> list[int]:
    """K, K1,K2,... or `auto` (an empty list: the largest k within --max-ppl-increase)."""
    if text.strip() == "auto":
        return []
    try:
        ks = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"k must be an integer or a comma-separated list, got {text!r}")
    if not ks:
        raise argparse.ArgumentTypeError("give at least one k")
    return ks


def compress_arguments(p, *, k_required: bool = True) -> None:
    """Every flag of `nbl compress`, defined once: `nbl estimate` takes the same ones (cli/estimate.py), so a
    compress command line, pasted, is estimated as it stands."""
    p.add_argument("--model", required=True, help="Hub repo id, local checkpoint directory, or .gguf file")
    p.add_argument("--revision", help="Hub revision (branch, tag or commit)")
    p.add_argument(
        "--dataset", default=R.DATASET, help="datasets path, local .json/.jsonl/.txt/.parquet, or c4 / wikitext2"
    )
    p.add_argument("--dataset-config", help="datasets config name")
    p.add_argument("--split", default=R.SPLIT)
    p.add_argument("--text-field", default=R.TEXT_FIELD)
    p.add_argument(
        "--num-samples", type=int, default=R.NUM_SAMPLES, help=f"calibration blocks (default {R.NUM_SAMPLES})"
    )
    p.add_argument("--seq-len", type=int, default=R.SEQ_LEN, help=f"tokens per block (default {R.SEQ_LEN})")
    p.add_argument("--seed", type=int, default=R.SEED)
    p.add_argument("--shuffle", action="store_true", help="take documents in a seeded random order")
    p.add_argument("--mode", choices=R.MODES, default=R.MODE)
    p.add_argument("--method", choices=R.METHODS, default=R.METHOD)
    p.add_argument(
        "--criterion",
        choices=CRITERIA + MEASURED,
        default=R.CRITERION,
        help=f"default {R.CRITERION}; cca is the paper's CCA bound; greedy and auto measure layer sets on the "
        "selection data (see --selection-dataset)",
    )
    p.add_argument(
        "--form",
        choices=FORMS,
        default=R.FORM,
        help="how outputs are written, so where they run (docs/engine.md#forms): nbl (our modeling file), "
        "linear (DeciLM replace_with_linear), fold (the map folded into the previous MLP: block mode "
        "writes the base's own class)",
    )
    p.add_argument(
        "--quantize",
        type=schemes_arg,
        metavar="SCHEME[,SCHEME]",
        help=f"also write each output quantized by llm-compressor into its SCHEME/ folder ({', '.join(SCHEMES)}: "
        "compressed-tensors, for vLLM; fold outputs only; needs `make quant-env`); with --eval the copies and "
        "the base quantized alike are evaluated too (docs/serving.md#quantized-outputs)",
    )
    p.add_argument(
        "--k",
        type=_ks,
        required=k_required,
        help="layers to replace: K or K1,K2,... (one output each), or auto with --max-ppl-increase",
    )
    p.add_argument("--out", type=Path, help="output directory (DIR/k{K} for several k)")
    p.add_argument("--dtype", default="auto", help="auto (float32 on CPU, bfloat16 on GPU), float32, bfloat16, float16")
    p.add_argument(
        "--save-dtype",
        choices=("auto", "bfloat16", "float16", "float32"),
        help="the saved weights' dtype, as a job's publish.dtype (auto: the base's stored one, bfloat16 from a GGUF); "
        "default: the compute dtype (--dtype)",
    )
    p.add_argument("--device", default="auto", help="the one device to run on (as --devices with one device)")
    p.add_argument(
        "--devices",
        metavar="LIST",
        help="calibrate data-parallel, one process per device: "
        "cuda:0,cuda:1, or cpu,cpu (default: every visible GPU, else cpu)",
    )
    p.add_argument(
        "--batch-size", type=int, help="blocks per forward pass (default: 2,048 tokens on CPU, 16,384 on a GPU)"
    )
    p.add_argument(
        "--stats-precision",
        choices=["auto", "float32", "tf32", "float64"],
        default="auto",
        help="precision of per-batch products (sums are always float64); auto: tf32 on a GPU (its "
        "scores within 2.2e-5 of float64 products', bench/results/product_precision.md), else float32",
    )
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="neither read nor write the statistics cache (nor, with --eval, the base's evaluation cache)",
    )
    p.add_argument(
        "--max-model-bytes",
        type=int,
        metavar="N",
        help="refuse input weights larger than N bytes, before any download (default: NBL_MAX_MODEL_BYTES)",
    )
    p.add_argument(
        "--host-cache-bytes",
        type=int,
        metavar="N",
        help="keep at most N bytes of hidden states between layers in memory, the rest on disk under "
        "NBL_HOME/spill (default: NBL_HOST_CACHE_BYTES, else no limit)",
    )
    p.add_argument(
        "--no-load-check",
        action="store_true",
        help="do not reload each output in a fresh process to check that it loads, generates and "
        "reproduces the model in memory (a job always checks; this saves a process start and a "
        "model load per output)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the result as JSON on stdout: calibration, scores, "
        "outputs and `result` (the API's job result: base, each output, delta, relative); a number "
        "that is not finite (the cond of a singular C_xx) is null",
    )
    ev = p.add_argument_group("evaluation (--eval: the options of `nbl eval`)")
    ev.add_argument(
        "--eval",
        action="store_true",
        help="after compressing, evaluate the base and every output "
        "reloaded from disk (wikitext2 perplexity unless asked otherwise), print base vs each k and "
        "rewrite each output's card with the results",
    )
    add_eval_options(ev)
    add_gate_option(p, ev)
    add_selection_options(p)
    add_refine_options(p)
