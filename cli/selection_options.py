"""`nbl compress`'s selection flags: the data measured criteria (greedy, auto) and `--k auto` score layer sets
on, in the same forms as the calibration dataset's; and the selection table printed after a run."""

from __future__ import annotations

from nbl import recipe as R


def add_selection_options(p) -> None:
    g = p.add_argument_group("selection (--criterion greedy|auto, --k auto)")
    g.add_argument(
        "--selection-dataset",
        help="the data layer sets are scored on: a sample of the target domain, "
        "never the evaluation's (default: the calibration's held-out tenth, in-distribution)",
    )
    g.add_argument("--selection-config", help="its datasets config name")
    g.add_argument("--selection-split", default="validation", help="its split (default validation)")
    g.add_argument("--selection-text-field", default=R.TEXT_FIELD)
    g.add_argument(
        "--selection-samples",
        type=int,
        default=R.SELECTION_SAMPLES,
        help=f"selection blocks of --seq-len tokens (default {R.SELECTION_SAMPLES})",
    )
    g.add_argument(
        "--max-ppl-increase",
        type=float,
        metavar="F",
        help="with --k auto: the largest k whose selection perplexity rises by at most F (0.10: 10%%); "
        "checked on the evaluation's perplexity too, a broken budget fails the run (exit 5)",
    )
    g.add_argument(
        "--no-enforce-budget",
        dest="enforce_budget",
        action="store_false",
        help="with --k auto: a budget broken on the evaluation is a warning, and the output is published",
    )
    g.add_argument(
        "--greedy-width",
        type=int,
        metavar="M",
        help="candidate layers the greedy criterion tries per step (default: NBL_GREEDY_WIDTH, else 8)",
    )


def selection_from_args(args) -> R.Selection | None:
    if args.selection_dataset is None:
        return None
    if args.selection_samples < 1:
        raise ValueError(f"--selection-samples must be positive, got {args.selection_samples}")
    return R.Selection(
        dataset=args.selection_dataset,
        config=args.selection_config,
        split=args.selection_split,
        text_field=args.selection_text_field,
        num_samples=args.selection_samples,
    )


def print_selection(sel: dict) -> None:
    """Every layer set measured on the selection data, the chosen ones marked."""
    data = sel["data"]
    where = (
        "calibration held-out (in-distribution)"
        if data.get("source") == "calibration held-out"
        else f"{data.get('path')} {data.get('split')}"
    )
    print(f"\nselection on {where}: {sel['tokens']} tokens, base perplexity {sel['base_ppl']:.3f}")
    chosen = {(c["k"], c["criterion"]) for c in sel["chosen"]}
    for t in sel["tried"]:
        mark = "*" if (t["k"], t["criterion"]) in chosen else " "
        print(f"{mark} k={t['k']:<3} {t['criterion']:<7} ppl {t['heldout_ppl']:>10.3f}  layers {t['layers']}")
