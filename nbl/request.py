"""Request bodies of the /v1 API (the responses are in service.jobs.responses).

Requests reject unknown keys (extra="forbid") and take JSON types strictly (no "4" for 4, no "yes"
for true). Validators raise ValueError, so bad input is a 422, never a 500. The defaults are the
Recipe's (recipe.py, the one place they live): the paper's C4, 256 x 2048 calibration tokens,
attention branches, NBL, CCA ranking. The worker turns a JobCreate into a Recipe once.

Names are checked against grammars, not resolved: a model is a Hub id or `local:NAME` (NAME under
NBL_MODELS_DIR); a local publish target is a NAME under NBL_PUBLISH_DIR. Paths, URLs and `..` never
get through (each field's type and grammar: nbl/request_fields.py). Limits that depend on the deployment
(max samples, max k) are checked by service/estimates/limits.py's `check_limits` with the Settings; the exact
layer count is the worker's to check.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SecretStr,
    StrictBool,
    StrictInt,
    Tag,
    model_serializer,
    model_validator,
)

from nbl import recipe as R
from nbl.data.task_records import parse_lines, text_lines
from nbl.gates import GatesSpec
from nbl.outputs.forms import FORMS, request_error
from nbl.outputs.gguf_formats import GGUF_TYPES, OUTPUT_DTYPES, check_formats, gguf_types, refuse_form
from nbl.outputs.quant_schemes import NAMES as QUANT_NAMES
from nbl.outputs.quant_schemes import QUANTIZE_HELP, refuse_quantize
from nbl.plain_text import plain_text, secret_token
from nbl.refine_schema import REFIT, HealSpec, RefitName, refine_error
from nbl.request_fields import (
    EVAL_TASKS,
    PERPLEXITY_CORPORA,
    DatasetConfig,
    DatasetName,
    HubRepoId,
    KValues,
    MetaKey,
    MetaValue,
    ModelId,
    Revision,
    SimpleName,
    Split,
    TextField,
    WebhookUrl,
)
from nbl.selection.schema import BudgetSpec, check_budget, without_none
from nbl.selection.score_fields import CRITERIA, MEASURED


def _distinct(values: list) -> list:
    if len(set(values)) != len(values):
        raise ValueError("values must be distinct")
    return values


# --- requests ------------------------------------------------------------------------------------


class Request(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class ModelSpec(Request):
    id: ModelId = Field(
        description="Hub repo id `owner/name`, or `local:NAME` for a model under NBL_MODELS_DIR",
        examples=["HuggingFaceTB/SmolLM2-135M-Instruct"],
    )
    revision: Revision | None = Field(default=None, description="Hub branch, tag or commit (default: main)")


class CalibrationSpec(Request):
    dataset: DatasetName = Field(default=R.DATASET, description="`c4`, `wikitext2`, or a Hub dataset id")
    config: DatasetConfig | None = None
    split: Split = R.SPLIT
    text_field: TextField = R.TEXT_FIELD
    num_samples: StrictInt = Field(default=R.NUM_SAMPLES, ge=1, description="calibration blocks")
    seq_len: StrictInt = Field(
        default=R.SEQ_LEN, ge=2, description="tokens per block (2 at least: a next token to predict)"
    )
    seed: StrictInt = Field(default=R.SEED, ge=0, le=2**32 - 1)
    shuffle: StrictBool = False


class SelectionSpec(Request):
    """What measured criteria (greedy, auto) and k auto score layer sets on, and heal's guard; never the evaluation."""

    dataset: DatasetName = Field(description="`c4`, `wikitext2`, or a Hub dataset id: a sample of your target domain")
    config: DatasetConfig | None = None
    split: Split = "validation"
    text_field: TextField = R.TEXT_FIELD
    num_samples: StrictInt = Field(default=R.SELECTION_SAMPLES, ge=1, description="selection blocks")


class CompressionSpec(Request):
    mode: Literal[R.MODES] = R.MODE  # type: ignore[valid-type]
    method: Literal[R.METHODS] = R.METHOD  # type: ignore[valid-type]
    criterion: Literal[CRITERIA + MEASURED] = Field(  # type: ignore[valid-type]
        default=R.CRITERION,
        description="how layers are ranked: cosine (the default, docs/quality.md#the-default-criterion), cca (the "
        "paper's CCA bound), nmse, loss; greedy and auto measure layer sets on the selection data",
    )
    k: KValues | Literal["auto"] = Field(
        description="layers to replace; a list gives one output per k from one calibration; auto: the largest "
        "within budget.max_ppl_increase",
        examples=[4, [4, 8], "auto"],
    )
    budget: BudgetSpec | None = Field(default=None, description="with k auto: the selection perplexity's largest rise")
    form: Literal[FORMS] | None = Field(  # type: ignore[valid-type]
        default=None,
        description="how outputs are written, so where they run: nbl (default; our modeling file), "
        "linear (DeciLM replace_with_linear), fold (the map folded into the previous MLP's down_proj; block mode "
        "writes the base's own class with fewer layers)",
        examples=["fold"],
    )
    refit: RefitName | None = Field(
        default=None,
        description=(
            "none (default): each map fitted once on the base model's activations; sequential: the replaced layers "
            "refitted in depth order on the compressed model's own activations (one more pass over the calibration data)"
        ),
        examples=["sequential"],
    )
    heal: HealSpec | None = Field(
        default=None,
        description=(
            "train only the maps against the base model's next-token distribution (KL on its top logits), on "
            "calibration text the fit never saw; absent: no healing"
        ),
    )
    _k_auto = model_validator(mode="after")(check_budget)
    # a request without them dumps as before
    _dump = model_serializer(mode="wrap")(without_none("budget", "form", "refit", "heal"))

    @model_validator(mode="after")
    def _form_fits(self):
        why = request_error(self.form or R.FORM, self.mode, self.method, self.criterion, self.k == "auto")
        if why is not None:
            raise ValueError(why)
        why = refine_error(self.form or R.FORM, self.method, self.refit or REFIT, self.heal is not None)
        if why is not None:
            raise ValueError(why)
        return self

    @property
    def ks(self) -> list[int]:
        return [] if self.k == "auto" else [self.k] if isinstance(self.k, int) else list(self.k)


def _task_jsonl(text: str) -> str:
    plain_text(text)  # Postgres stores no NUL; the parsed lines are checked again (task_records)
    form, _ = parse_lines(text_lines(text), lambda n: f"line {n}")
    if form is None:
        raise ValueError("no records: give at least one JSON line")
    return text


class TaskFile(Request):
    name: SimpleName = Field(description="the task's name in the results (`nbl eval --task-file`: the file's stem)")
    jsonl: Annotated[str, Field(min_length=1), AfterValidator(_task_jsonl)] = Field(
        description='the file\'s text: JSON lines, all {"context", "choices", "label"} or all '
        '{"contexts", "continuation", "label"}',
        examples=['{"contexts": ["A", "B"], "continuation": " c", "label": 0}\n'],
    )


class EvaluationSpec(Request):
    perplexity: Annotated[list[Literal[PERPLEXITY_CORPORA]], AfterValidator(_distinct)] = Field(  # type: ignore[valid-type]
        default_factory=lambda: list(R.PERPLEXITY)
    )
    tasks: Annotated[list[Literal[EVAL_TASKS]], AfterValidator(_distinct)] = Field(default_factory=list)  # type: ignore[valid-type]
    task_files: list[TaskFile] = Field(default_factory=list, max_length=16, description="your own tasks")
    limit: StrictInt | None = Field(default=None, ge=1, description="first N documents of each task")
    max_tokens: StrictInt | None = Field(default=None, ge=2, description="perplexity: score only the first N tokens")
    speed: StrictBool = False

    @model_validator(mode="after")
    def _one_result_per_name(self):
        names = [*self.tasks, *(f.name for f in self.task_files)]
        clash = sorted({n for n in names if names.count(n) > 1})
        if clash:
            raise ValueError(f"two tasks would report under the name {clash[0]!r}: rename the task file")
        return self


class PublishSpec(Request):
    card_metadata: StrictBool | None = Field(
        default=None,
        description="quote the request's `metadata` on the model "
        "card (default: left off; the card is public on the Hub). The "
        "webhook_url is never on the card",
    )
    formats: (
        Annotated[list[str], Field(min_length=1, max_length=1 + len(GGUF_TYPES)), AfterValidator(check_formats)] | None
    ) = Field(
        default=None,
        description='what each output is published as: "safetensors" (always) and llama.cpp GGUF '
        f'files "gguf:TYPE", TYPE one of {", ".join(GGUF_TYPES)} (default: ["safetensors"]). GGUF needs an '
        "output llama.cpp has an architecture for: compression.form linear or fold, not nbl",
        examples=[["safetensors", "gguf:q4_k_m"]],
    )
    dtype: Literal[OUTPUT_DTYPES] | None = Field(  # type: ignore[valid-type]
        default=None,
        description="the saved weights' dtype (default auto: the base's stored dtype, bfloat16 for a GGUF input)",
    )
    quantize: Annotated[list[Literal[QUANT_NAMES]], AfterValidator(_distinct)] | None = Field(  # type: ignore[valid-type]
        default=None, max_length=len(QUANT_NAMES), description=QUANTIZE_HELP, examples=[["w4a16"]]
    )
    # stored and hashed as before these existed when not given
    _dump = model_serializer(mode="wrap")(without_none("card_metadata", "formats", "dtype", "quantize"))


def _secret_token(value: SecretStr) -> SecretStr:
    secret_token(value.get_secret_value())  # a surrogate failed at encrypt (a 500); its message quotes no token
    return value


class HubPublish(PublishSpec):
    repo_id: HubRepoId
    private: StrictBool = True
    revision: Revision | None = Field(default=None, description="branch to push to (default: main)")
    create_pr: StrictBool = False
    # Write-only: excluded from every dump, so it is never in jobs.spec, the idempotency hash or a
    # response; the API stores it encrypted (jobs.hub_token_encrypted) and the job's end deletes it.
    token: Annotated[SecretStr, AfterValidator(_secret_token)] | None = Field(
        default=None,
        exclude=True,
        min_length=1,
        max_length=1024,
        description="a Hub write token for this job only, visible ASCII (stored encrypted, deleted when the job ends, "
        "never returned); default: the team's token",
    )


class LocalPublish(PublishSpec):
    local_dir: SimpleName = Field(description="a directory NAME under NBL_PUBLISH_DIR/<team> (not a path)")
    overwrite: StrictBool = Field(default=False, description="replace NAME although another job of the team made it")


def _publish_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        return "hub" if "repo_id" in value else "local" if "local_dir" in value else None
    return "hub" if isinstance(value, HubPublish) else "local" if isinstance(value, LocalPublish) else None


Publish = Annotated[
    Annotated[HubPublish, Tag("hub")] | Annotated[LocalPublish, Tag("local")],
    Discriminator(
        _publish_kind,
        custom_error_type="publish_target",
        custom_error_message="publish needs either `repo_id` (the Hub) or `local_dir`",
    ),
]


class JobCreate(Request):
    model: ModelSpec
    calibration: CalibrationSpec = Field(default_factory=CalibrationSpec)
    compression: CompressionSpec
    evaluation: EvaluationSpec = Field(default_factory=EvaluationSpec)
    selection: SelectionSpec | None = Field(
        default=None,
        description="the data greedy, auto and k auto measure on "
        "(default: the calibration's held-out tenth); see SelectionSpec",
    )
    gates: GatesSpec | None = Field(
        default=None,
        description="quality gates on the evaluation: an output that "
        "fails one is not published; none passing fails the job (error.type quality)",
    )
    publish: Publish | None = None
    metadata: dict[MetaKey, MetaValue] = Field(default_factory=dict, max_length=16)
    webhook_url: WebhookUrl | None = Field(
        default=None,
        description="POSTed job.running, job.succeeded, job.failed and job.cancelled events, signed "
        "per Standard Webhooks with your team's secret; http(s) to a public address",
        examples=["https://ci.example.com/hooks/nbl"],
    )
    _dump = model_serializer(mode="wrap")(without_none("selection"))

    @model_validator(mode="after")
    def _publish_fits_the_form(self):
        if self.publish is not None and gguf_types(self.publish.formats):  # what llama.cpp cannot hold: a 422 now
            refuse_form(self.compression.form or R.FORM, self.compression.mode)  # unset: the default form, nbl
        quant = (self.publish.quantize if self.publish else None, self.gates.quantized if self.gates else None)
        refuse_quantize(self.compression.form or R.FORM, self.compression.mode, *quant)  # publish.quantize's 422
        return self
