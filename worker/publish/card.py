"""The model card (README.md) of a compressed output, built from plain data: what was done, how, and
what it cost.

    front matter   base_model, license, tags, library_name, model-index (base and compressed results)
    body           method + paper link, the exact recipe, the replaced layers and their scores, the
                   score plot, the before/after table, the loading snippet

Inputs are the output's own nbl_scores.json (`report`, written by the engine), the flat evaluation
metrics of the job ({"base": {...}, "compressed": {...}}, names as worker.eval_stage.flatten gives
them, e.g. "perplexity/wikitext2/ppl") and the job's request (the recipe), so the card says nothing
the output directory and the job row do not already hold. `card_text` is pure; only `write_card` writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from nbl.selection.score_fields import SCORE_LABELS

from ..eval.truncation import describe
from ..quant.card import quant_section
from .card_recipe import recipe_section
from .card_refine import refine_section
from .card_runs import form_sentence, runs_in_section
from .card_selection import selection_section
from .model_index import eval_results
from .vllm_usage import vllm_usage

README = "README.md"
PLOT = "nbl_scores.png"
PAPER = "https://arxiv.org/abs/2505.21077"
TAGS = ["nbl", "compression"]

# The score fields (nbl/selection/score_fields.py) the card's table shows, in its order, when present.
SCORE_COLUMNS = [(f, SCORE_LABELS[f]) for f in ("cca_bound", "nmse", "heldout_nmse", "cosine", "loss_rise")]


@dataclass
class CardInfo:
    report: dict  # nbl_scores.json of the output
    metrics: dict[str, dict[str, float | None]] = field(default_factory=dict)  # {"base": flat, "compressed": flat}
    recipe: dict | None = None  # the job request (no secrets); None: `nbl compress`, recipe from the report
    repo_id: str | None = None  # where it is published, for the loading snippet
    subfolder: str | None = None  # k{K} when one job published several outputs side by side
    plot: str | None = PLOT  # the plot's file name beside README.md, None when there is none
    warnings: list[str] = field(default_factory=list)  # the run's (worker/run_warnings.py), listed on the card
    scored: dict[str, dict] = field(default_factory=dict)  # evaluations cut short: how much each scored
    quantized: list[dict] = field(default_factory=list)  # its SCHEME/ copies (card_quant.copies), publish.quantize


# --- small readers of the report -----------------------------------------------------------------


def hub_base(report: dict) -> str | None:
    """The base model's Hub id, when it came from the Hub (the engine fingerprints Hub models as
    `hub:<id>@<sha>`); a local path or a GGUF file has none."""
    fp = report.get("base_fingerprint") or ""
    return report.get("base_model") if fp.startswith("hub:") else None


def base_label(report: dict, recipe: dict | None) -> str:
    if hub_base(report):
        return hub_base(report)
    job_model = ((recipe or {}).get("model") or {}).get("id")
    if job_model:
        return job_model  # e.g. local:smollm2, as the job named it
    return Path(str(report.get("base_model") or "base model")).name


def model_name(report: dict, recipe: dict | None) -> str:
    r = report.get("recipe") or {}
    base = base_label(report, recipe).split("/")[-1].removeprefix("local:")
    return f"{base}-nbl-{r.get('mode', 'attn')}-k{r.get('k', len(report.get('replaced_layers') or []))}"


def format_number(v, digits: int = 4) -> str:
    """A card's number: thousands separated, small values in significant digits, None as a dash."""
    if v is None:
        return "–"
    if isinstance(v, float) and v.is_integer() and abs(v) >= 1000:
        v = int(v)
    if isinstance(v, int):
        return f"{v:,}"
    if v != 0 and abs(v) < 1e-3:
        return f"{v:.{max(digits, 1)}g}"
    return f"{v:,.{digits}f}"


# --- front matter --------------------------------------------------------------------------------


def card_data(info: CardInfo):
    from huggingface_hub import ModelCardData

    name = model_name(info.report, info.recipe)
    results = eval_results(info.metrics, name, info.scored)
    return ModelCardData(
        base_model=hub_base(info.report),
        license=info.report.get("base_license"),
        library_name="transformers",
        pipeline_tag="text-generation",
        tags=list(TAGS),
        model_name=name if results else None,
        eval_results=results or None,
    )


# --- body ----------------------------------------------------------------------------------------


CRITERION_GLOSS = {  # the one-shot criteria a reader of the card may not know (the measured ones have their section)
    "cca": " (the CCA bound Σ(1 − ρᵢ²) between a layer's input and output: the lower, the more linear the layer, "
    "as the paper ranks)",
    "cosine": " (the mean cosine between the residual stream before and after the replaced part: the higher, the "
    "less the layer changes it, as the DROP baselines rank)",
}


def method_section(report: dict, base: str) -> str:
    r = report.get("recipe") or {}
    mode, method = r.get("mode", "attn"), r.get("method", "nbl")
    layers = report.get("replaced_layers") or []
    n = len(report.get("layers") or []) or None
    what = "attention branch" if mode == "attn" else "whole decoder block (attention and MLP)"
    how = (
        "replaced by its linear least-squares (LMMSE) approximation `y = W x + b`, fitted in closed form "
        "on calibration activations"
        if method == "nbl"
        else "removed (the DROP baseline: the residual stream passes through)"
    )
    crit = r.get("criterion", "cca")
    return (
        f"This model is **{base}** compressed with **Neural Block Linearization** "
        f"([NBL, arXiv 2505.21077]({PAPER})).\n\n"
        f"In {len(layers)} of its {n or '?'} decoder layers the {what} was {how}. "
        f"Layers were chosen by the `{crit}` criterion"
        + CRITERION_GLOSS.get(crit, "")
        + ". Replaced attention branches hold no KV cache, so the KV cache shrinks by the same fraction.\n"
        + params_sentence(report.get("params"))
        + form_sentence(r.get("form", "nbl"), mode)
    )


def params_sentence(params: dict | None) -> str:
    """Parameters removed, net of the maps, in total and, for a mixture of experts, active per token."""
    if not params:
        return ""  # an older report
    text = f"\nParameters removed: {_billions(params['removed_total'])} of {_billions(params['total'])}"
    if params["active"] != params["total"]:
        text += f"; active per token: {_billions(params['removed_active'])} of {_billions(params['active'])}"
    return text + " (net of the maps added).\n"


def _billions(n: int) -> str:
    return f"{n / 1e9:.2f}B" if abs(n) >= 1e8 else f"{n:,}"


def layers_section(report: dict, plot: str | None) -> str:
    r = report.get("recipe") or {}
    mode = r.get("mode", "attn")
    chosen = set(report.get("replaced_layers") or [])
    rows = [s for s in report.get("layers") or [] if s.get(mode)]
    text = f"Replaced layers: **{sorted(chosen)}** ({mode} mode).\n"
    if not rows:
        return text
    cols = [(f, t) for f, t in SCORE_COLUMNS if any(s[mode].get(f) is not None for s in rows)]
    text += "\n| layer | replaced | " + " | ".join(t for _, t in cols) + " |\n"
    text += "|---:|:---:|" + "---:|" * len(cols) + "\n"
    for s in rows:
        mark = "✔" if s["layer"] in chosen else ""
        text += f"| {s['layer']} | {mark} | " + " | ".join(format_number(s[mode].get(f)) for f, _ in cols) + " |\n"
    if plot:
        text += f"\n![per-layer scores, replaced layers marked]({plot})\n"
    return text


def eval_rows(base: dict, comp: dict) -> list[tuple[str, str, str, str]]:
    """(metric, base, compressed, change) for every number the evaluation gave."""
    rows = []

    def add(label: str, key: str, digits: int = 4, ratio: bool = False) -> None:
        b, c = base.get(key), comp.get(key)
        if b is None and c is None:
            return
        if b is None or c is None:
            change = "–"
        elif ratio:
            change = f"×{c / b:.2f}" if b else "–"
        else:
            change = f"{c - b:+.{digits}f}" + (f" ({(c - b) / b:+.1%})" if b else "")
        rows.append((label, format_number(b, digits), format_number(c, digits), change))

    keys = sorted(set(base) | set(comp))
    for k in keys:
        p = k.split("/")
        if p[0] == "perplexity" and p[-1] == "ppl":
            add(f"{p[1]} perplexity ↓", k, 3)
    for k in keys:
        p = k.split("/")
        if p[0] == "tasks" and p[-1] in ("acc", "acc_norm"):
            add(f"{p[1]} {p[-1]} ↑", k, 4)
    for k in keys:
        if k.startswith("speed/prefill_tokens_per_s/"):
            add(f"prefill tokens/s @{k.rsplit('/', 1)[1]} ↑", k, 1, ratio=True)
    add("decode tokens/s ↑", "speed/decode_tokens_per_s", 1, ratio=True)
    add("KV cache bytes/token ↓", "speed/kv_cache_bytes_per_token", 0, ratio=True)
    add("parameters (non-embedding)", "params/non_embedding_params", 0, ratio=True)
    add("parameters (total)", "params/params", 0, ratio=True)
    return rows


def eval_section(metrics: dict, scored: dict[str, dict] | None = None) -> str:
    base, comp = metrics.get("base") or {}, metrics.get("compressed") or {}
    rows = eval_rows(base, comp)
    if not rows:
        return (
            "Not evaluated here. `nbl eval --model <this directory>` measures perplexity, accuracy, speed and "
            "KV cache against the base.\n"
        )
    text = "| metric | base | compressed | change |\n|---|---:|---:|---:|\n"
    text += "".join(f"| {m} | {b} | {c} | {d} |\n" for m, b, c, d in rows)
    text += "\nMeasured by the nbl-service evaluation (`worker/eval`); the base and this model on the same data.\n"
    if scored:
        text += (
            "\n**Truncated evaluation**, scored on a sample: "
            + "; ".join(describe(s, i) for s, i in scored.items())
            + ".\n"
        )
    return text


def usage_section(repo_id: str | None, subfolder: str | None) -> str:
    where = repo_id or "path/to/this/directory"
    sub = f', subfolder="{subfolder}"' if subfolder else ""
    return (
        "```python\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        f'model = AutoModelForCausalLM.from_pretrained("{where}"{sub}, trust_remote_code=True)\n'
        f'tokenizer = AutoTokenizer.from_pretrained("{where}"{sub}, trust_remote_code=False)\n```\n\n'
        "`trust_remote_code=True` runs `modeling_nbl.py`, shipped beside the weights: one file, torch and "
        "transformers only, holding the linear layers that replace the original blocks. The tokenizer needs "
        "no code (`trust_remote_code=False` keeps transformers from asking).\n"
    ) + vllm_usage(repo_id, subfolder)


def card_text(info: CardInfo) -> str:
    """The whole README.md: YAML front matter, then the body."""
    report, base = info.report, base_label(info.report, info.recipe)
    cal = report.get("calibration") or {}
    recipe = recipe_section(report, info.recipe)
    if cal.get("tokens"):
        recipe += (
            f"\nCalibration: {format_number(cal.get('num_samples'))} × {format_number(cal.get('seq_len'))} = "
            f"{format_number(cal['tokens'])} tokens.\n"
        )
    if report.get("dtype"):
        recipe += f"\nWeights: {report['dtype']}.\n"
    selection = selection_section(report.get("selection"), len(report.get("replaced_layers") or []))
    rec, refine = report.get("recipe") or {}, refine_section(report.get("refine"))
    sections = [
        (f"# {model_name(report, info.recipe)}", method_section(report, base)),
        ("## Recipe", recipe),
        *([("## Selection", selection)] if selection else []),
        *([("## Refinement", refine)] if refine else []),
        ("## Replaced layers and their scores", layers_section(report, info.plot)),
        ("## Evaluation: base vs compressed", eval_section(info.metrics, info.scored)),
        *([("## Quantized", quant_section(info.quantized, info.metrics))] if info.quantized else []),
        *([("## Warnings", "".join(f"- {w}\n" for w in info.warnings))] if info.warnings else []),
        (
            "## Runs in",
            runs_in_section(
                rec.get("form"),
                rec.get("mode", "attn"),
                rec.get("method", "nbl"),
                info.repo_id,
                info.subfolder,
                report.get("base_family"),
            ),
        ),
        *([("## How to load", usage_section(info.repo_id, info.subfolder))] if rec.get("form", "nbl") == "nbl" else []),
        ("## Citation", f"Neural Block Linearization, [arXiv 2505.21077]({PAPER}).\n"),
    ]
    body = "\n".join(f"{head}\n\n{text.strip()}\n" for head, text in sections)
    return f"---\n{card_data(info).to_yaml()}\n---\n\n{body}"


def write_card(directory: Path, info: CardInfo) -> Path:
    """README.md (and the score plot) into `directory`; returns the README path."""
    from .plot import score_plot

    directory = Path(directory)
    plotted = score_plot(info.report, directory / PLOT)
    path = directory / README
    path.write_text(card_text(replace(info, plot=PLOT if plotted else None)), encoding="utf-8")
    return path
