"""What one compression run is asked to do, typed and frozen: the one form the request takes past the API.

    Recipe
      model, revision
      calibration    dataset, config, split, text_field, num_samples, seq_len, seed, shuffle
      compression    ks, mode, method, criterion, form (+ k auto's budget: max_ppl_increase, ks empty),
                     refit, heal (the maps refined after the layers are chosen)
      selection      dataset, config, split, text_field, num_samples (None: the calibration's held-out tenth)
      evaluation     perplexity, tasks, task files, limit, max_tokens, speed (+ the CLI's suite, ...)
      publishing     a Hub repo or a local directory name (None: nowhere; the CLI's --out)
      gates          max_ppl_increase, max_acc_drop (None: every output is published)

A job's stored request becomes a JobCreate (schemas.py), then a Recipe once (`from_request`); `nbl
compress` builds the same Recipe from its flags. The defaults live here only: the request schema's
fields and the CLI's flags read these constants (the paper's: C4, 256 x 2048 calibration tokens,
attention branches, NBL; but cosine ranking, not the paper's CCA bound, which lost to it at attn k=8 and block
k=2 on both models measured: docs/quality.md#the-default-criterion). Torch-free: the API imports the schema.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Mapping

from nbl.data.task_records import text_lines
from nbl.outputs.forms import FORM
from nbl.refine_schema import HEAL_LR, REFIT

DATASET = "c4"
SPLIT = "train"
TEXT_FIELD = "text"
NUM_SAMPLES = 256
SEQ_LEN = 2048
SEED = 0
MODES = ("attn", "block")
METHODS = ("nbl", "drop")
MODE, METHOD, CRITERION = "attn", "nbl", "cosine"  # `cca` (the paper's) is one flag away
SELECTION_SAMPLES = 32  # selection blocks (of the calibration's length) when a selection dataset is named
PERPLEXITY = ("wikitext2",)  # a job's default evaluation; `nbl compress --eval` asking nothing gets the same


@dataclass(frozen=True)
class Calibration:
    dataset: str = DATASET
    config: str | None = None
    split: str = SPLIT
    text_field: str = TEXT_FIELD
    num_samples: int = NUM_SAMPLES
    seq_len: int = SEQ_LEN
    seed: int = SEED
    shuffle: bool = False


@dataclass(frozen=True)
class Heal:
    """Training of the maps against the base's next-token distribution (worker/engine/refine/heal.py)."""

    tokens: int
    steps: int | None = None  # None: one pass over the training blocks
    lr: float = HEAL_LR
    max_seconds: float | None = None


@dataclass(frozen=True)
class Compression:
    ks: tuple[int, ...]
    mode: str = MODE
    method: str = METHOD
    criterion: str = CRITERION
    form: str = FORM  # nbl | linear | fold (nbl/outputs/forms.py): how the output is written, so where it runs
    max_ppl_increase: float | None = None  # k auto: the largest k within this rise of the selection perplexity
    enforce_budget: bool = True  # k auto: a budget broken on the evaluation fails the job (False: a warning)
    refit: str = REFIT  # none | sequential (nbl/refine_schema.py)
    heal: Heal | None = None  # None: no healing


@dataclass(frozen=True)
class Selection:
    """The data measured criteria (greedy, auto) and k auto score layer sets on; never the evaluation's."""

    dataset: str
    config: str | None = None
    split: str = "validation"
    text_field: str = TEXT_FIELD
    num_samples: int = SELECTION_SAMPLES


@dataclass(frozen=True)
class Evaluation:
    """What to measure on the base and on every output. Jobs ask for the first six; the rest are
    `nbl compress --eval`'s (task files by path, suites, timing repeats, batching). Empty: no evaluation."""

    perplexity: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    limit: int | None = None
    max_tokens: int | None = None
    speed: bool = False
    task_texts: tuple[tuple[str, str], ...] = ()  # a job's task files: (name, JSONL text)
    task_files: tuple[str, ...] = ()  # paths
    suite: str | None = None
    repeats: int | None = None  # None: the evaluation's own default
    batch_tokens: int | None = None

    def empty(self) -> bool:
        return not (self.perplexity or self.tasks or self.task_texts or self.task_files or self.suite or self.speed)


@dataclass(frozen=True)
class Publishing:
    """Where the outputs go: a Hub repo (`repo_id`) or a directory NAME of the team (`local_dir`). The
    Hub token is never here: the worker reads it from the database."""

    repo_id: str | None = None
    private: bool = True
    revision: str | None = None
    create_pr: bool = False
    local_dir: str | None = None
    overwrite: bool = False
    formats: tuple[str, ...] = ("safetensors",)  # + "gguf:TYPE" (nbl/outputs/gguf_formats.py)
    dtype: str | None = "auto"  # the saved weights' dtype; auto: the base's stored one; None (nbl compress): computed
    quantize: tuple[
        str, ...
    ] = ()  # each output once more per scheme, in its SCHEME/ folder (nbl/outputs/quant_schemes.py)


@dataclass(frozen=True)
class Gates:
    """Quality gates (nbl/gates.py): per corpus the largest relative perplexity rise, per task
    the largest absolute accuracy drop, both against the base; worker/gates.py checks them."""

    max_ppl_increase: Mapping[str, float] = field(default_factory=dict)
    max_acc_drop: Mapping[str, float] = field(default_factory=dict)
    quantized: Gates | None = None  # the same bounds' kind, for each quantized copy (publish.quantize)

    def empty(self) -> bool:
        return not (self.max_ppl_increase or self.max_acc_drop or (self.quantized and not self.quantized.empty()))


@dataclass(frozen=True)
class Recipe:
    model: str  # a Hub id, `local:NAME` (a job), or a path (`nbl compress`)
    compression: Compression
    revision: str | None = None
    calibration: Calibration = Calibration()
    evaluation: Evaluation = Evaluation()
    publishing: Publishing | None = None
    gates: Gates | None = None
    selection: Selection | None = None
    # What the model card quotes: the request as submitted (JSON, no secrets); None (`nbl compress`):
    # the card quotes the output's own report.
    request: Mapping[str, Any] | None = field(default=None, compare=False)

    @property
    def ks(self) -> tuple[int, ...]:
        return self.compression.ks


def from_request(spec) -> Recipe:
    """The Recipe of a validated request (a schemas.JobCreate, which imports this module for its
    defaults, so not imported here): the one conversion, made once by the worker task."""
    cal, comp, ev, pub = spec.calibration, spec.compression, spec.evaluation, spec.publish
    publishing = None
    if pub is not None:
        given = pub.model_dump(include=set(Publishing.__dataclass_fields__) - {"formats", "dtype", "quantize"})
        publishing = Publishing(
            **given,
            formats=tuple(pub.formats or ("safetensors",)),
            dtype=pub.dtype or "auto",
            quantize=tuple(pub.quantize or ()),
        )
    return Recipe(
        model=spec.model.id,
        revision=spec.model.revision,
        calibration=Calibration(**cal.model_dump()),
        compression=Compression(
            ks=tuple(comp.ks),
            mode=comp.mode,
            method=comp.method,
            criterion=comp.criterion,
            form=comp.form or FORM,
            max_ppl_increase=comp.budget.max_ppl_increase if comp.budget is not None else None,
            enforce_budget=comp.budget is None or comp.budget.enforce is not False,
            refit=comp.refit or REFIT,
            heal=None if comp.heal is None else Heal(**comp.heal.model_dump()),
        ),
        selection=None if spec.selection is None else Selection(**spec.selection.model_dump()),
        evaluation=Evaluation(
            perplexity=tuple(ev.perplexity),
            tasks=tuple(ev.tasks),
            limit=ev.limit,
            max_tokens=ev.max_tokens,
            speed=ev.speed,
            task_texts=tuple((f.name, f.jsonl) for f in ev.task_files),
        ),
        publishing=publishing,
        gates=None if spec.gates is None else gates_of(spec.gates.model_dump()),
        request=quoted(spec.model_dump(mode="json")),
    )


def gates_of(spec: dict) -> Gates:
    """The request's gates section (a dump of nbl/gates.GatesSpec) as Gates, its quantized bounds included."""
    q = spec.get("quantized")
    return Gates(
        max_ppl_increase=spec.get("max_ppl_increase") or {},
        max_acc_drop=spec.get("max_acc_drop") or {},
        quantized=None if q is None else Gates(q.get("max_ppl_increase") or {}, q.get("max_acc_drop") or {}),
    )


def quoted(request: dict) -> dict:
    """The request as the model card quotes it (the card is public on the Hub): never the webhook_url (its
    query or user part may hold a token), the metadata only with `publish.card_metadata: true`, and a task
    file by its name, line count and digest, not its text (a private test set must not be published with
    the model)."""
    private = {"webhook_url"} | (set() if (request.get("publish") or {}).get("card_metadata") else {"metadata"})
    request = {key: value for key, value in request.items() if key not in private}
    files = (request.get("evaluation") or {}).get("task_files")
    if not files:
        return request
    digests = [
        {
            "name": f["name"],
            "lines": sum(1 for x in text_lines(f["jsonl"]) if x.strip()),
            "sha256": hashlib.sha256(f["jsonl"].encode()).hexdigest(),
        }
        for f in files
    ]
    return {**request, "evaluation": {**request["evaluation"], "task_files": digests}}
