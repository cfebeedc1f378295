"""`nbl compress --eval --gate SPEC`: the job's quality gates (nbl/gates.py), locally.

    --gate wikitext2:ppl:+10%      perplexity on wikitext2 at most 10 % above the base's
    --gate arc_easy:acc:-0.02      accuracy on arc_easy at most 0.02 below the base's (also -2%: 2 points)

A perplexity gate is relative and must say `%`: `wikitext2:ppl:10` was read as +1,000 %, so a typo
let every output pass. An accuracy drop without `%` is a fraction below 1 (`-1` would allow any drop).

The pipeline checks them as it does a job's (worker/gates.py): an output that fails one is not
published (its card is not written; a warning says so), and when none passes the command exits
EXIT_QUALITY (5), as `nbl wait` does for a job that failed its gates. Argparse wiring and parsing only:
nothing heavy is imported here.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from nbl import recipe as R
from nbl.gates import unmeasured

EXIT_QUALITY = 5
EXIT_CODES = """exit codes:
  0  done (with --gate: some output passed every gate; only those got their card)
  1  an output failed its load check (reloaded in a fresh process, it did not reproduce the model)
  2  a usage error: a bad flag, model, data set or gate (one line on stderr)
  5  --gate: no output passed the quality gates (the checks are on stderr; no card was written)"""
METRICS = {"ppl": ("max_ppl_increase", "+"), "acc": ("max_acc_drop", "-")}
_SPEC = re.compile(
    r"(?P<name>[A-Za-z0-9][A-Za-z0-9_-]*):(?P<metric>[a-z]+):(?P<sign>[+-]?)(?P<num>[0-9]*\.?[0-9]+)(?P<pct>%?)"
)


def parse_gate(text: str) -> tuple[str, str, float]:
    """'wikitext2:ppl:+10%' -> ("max_ppl_increase", "wikitext2", 0.10); 'arc_easy:acc:-0.02' ->
    ("max_acc_drop", "arc_easy", 0.02). A percentage is of the base for ppl, points of accuracy for acc."""
    m = _SPEC.fullmatch(text.strip())
    if m is None:
        raise argparse.ArgumentTypeError(
            f"--gate takes NAME:ppl:+RISE or NAME:acc:-DROP (e.g. wikitext2:ppl:+10%, arc_easy:acc:-0.02), got {text!r}"
        )
    if m["metric"] not in METRICS:
        raise argparse.ArgumentTypeError(
            f"--gate {text}: the metric is ppl (perplexity) or acc (accuracy), not {m['metric']!r}"
        )
    kind, sign = METRICS[m["metric"]]
    if m["sign"] and m["sign"] != sign:
        what = "a rise (+)" if sign == "+" else "a drop (-)"
        raise argparse.ArgumentTypeError(f"--gate {text}: a {m['metric']} gate allows {what}")
    number = float(m["num"])
    if kind == "max_ppl_increase" and not m["pct"]:
        pct = f"{number * 100 if number < 1 else number:g}"  # 0.1 meant +10 %; 10 meant +10 % too, surely
        raise argparse.ArgumentTypeError(
            f"--gate {text}: a perplexity gate is a relative rise and must say %, "
            f"e.g. {m['name']}:ppl:+{pct}% (perplexity at most {pct} % above the base's)"
        )
    if kind == "max_acc_drop" and not m["pct"] and number >= 1:
        raise argparse.ArgumentTypeError(
            f"--gate {text}: an accuracy drop without % is a fraction below 1 "
            f"(0.02: 2 points); for {m['num']} point{'' if number == 1 else 's'} write "
            f"{m['name']}:acc:-{m['num']}%"
        )
    value = number / (100 if m["pct"] else 1)
    if kind == "max_acc_drop" and value > 1:
        raise argparse.ArgumentTypeError(f"--gate {text}: an accuracy drop is at most 100%")
    return kind, m["name"], value


def add_gate_option(parser, group) -> None:
    """--gate in `group`; the exit codes in the parser's --help."""
    parser.epilog = EXIT_CODES
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    group.add_argument(
        "--gate",
        action="append",
        type=parse_gate,
        default=[],
        metavar="NAME:ppl:+X|NAME:acc:-X",
        help="with --eval, a quality gate (repeatable): wikitext2:ppl:+10%% (perplexity at most 10%% "
        "above the base's), arc_easy:acc:-0.02 (accuracy at most 0.02 below); an output that fails "
        f"one is not published, and none passing exits {EXIT_QUALITY}",
    )


def add_to_request(body: dict, gates: list[tuple[str, str, float]]) -> None:
    """`nbl submit --gate`: each parsed gate into the request's `gates` (on top of the file's); the API
    checks that the evaluation measures it (a 422 naming the field)."""
    for kind, name, value in gates:
        section = body.setdefault("gates", {})
        if not isinstance(section, dict) or not isinstance(section.setdefault(kind, {}), dict):
            raise ValueError(f"gates.{kind} must be a mapping")
        section[kind][name] = value


def gates_from_args(args, espec) -> R.Gates | None:
    """The Recipe's gates from --gate; each must name something --eval measures (checked before compressing)."""
    if not getattr(args, "gate", None):
        return None
    if espec is None:
        raise ValueError("--gate checks the evaluation: give --eval")
    found: dict[str, dict[str, float]] = {"max_ppl_increase": {}, "max_acc_drop": {}}
    for kind, name, value in args.gate:
        if name in found[kind]:
            raise ValueError(f"--gate: two {kind} gates on {name}")
        found[kind][name] = value
    tasks = [*espec.tasks, *(Path(f).stem for f in espec.task_files)]
    if espec.suite:
        tasks += [*espec.suite_only()]
    errors = unmeasured(found, espec.perplexity, tasks, prefix=())
    if errors:
        raise ValueError(
            errors[0]["msg"].replace("evaluation.perplexity", "--perplexity").replace("evaluation.tasks", "--tasks")
        )
    return R.Gates(max_ppl_increase=found["max_ppl_increase"], max_acc_drop=found["max_acc_drop"])


def check_lines(summary: dict) -> list[str]:
    """The gates' checks, one line each, as `nbl compress` prints them."""
    from worker.gates import describe

    return [f"gate {'pass' if c['passed'] else 'FAIL'}: {describe(c)}" for c in summary.get("checks") or []]
