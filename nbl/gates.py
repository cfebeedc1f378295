"""Quality gates of a job: the request's `gates` section, and the check that each gate is measured.

    "gates": {"max_ppl_increase": {"wikitext2": 0.10},   # relative: ppl <= base ppl * (1 + 0.10)
              "max_acc_drop": {"arc_easy": 0.02}}        # absolute: acc >= base acc - 0.02

A gate needs its metric: a perplexity gate names a corpus of `evaluation.perplexity`, an accuracy gate a
task of `evaluation.tasks` or the name of one of its `task_files`. `unmeasured` says which are not, as FastAPI-shaped errors naming the field,
so the API answers 422 at submit (and `nbl compress --gate` refuses the same before compressing), rather
than a job that runs for an hour and then cannot decide. Checking the numbers is the worker's
(worker/gates.py). Torch-free: the API imports this.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from nbl.selection.schema import without_none

# Names of lm-eval tasks and of our corpora: letters, digits, _ and -, as EVAL_TASKS and PERPLEXITY_CORPORA are.
GateName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")]
PplRise = Annotated[float, Field(ge=0, le=100, allow_inf_nan=False, description="largest relative rise, 0.10 = +10%")]
AccDrop = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False, description="largest absolute drop, 0.02 = 2 points")]

# The flat metric each gate reads (worker/pipeline.py flatten names them).
PPL_METRIC = "perplexity/{}/ppl"
ACC_METRIC = "tasks/{}/acc"


class Bounds(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    max_ppl_increase: dict[GateName, PplRise] = Field(
        default_factory=dict,
        max_length=8,
        examples=[{"wikitext2": 0.10}],
        description="per perplexity corpus: the largest relative rise over the base (0.10: +10%)",
    )
    max_acc_drop: dict[GateName, AccDrop] = Field(
        default_factory=dict,
        max_length=16,
        examples=[{"arc_easy": 0.02}],
        description="per task: the largest absolute drop of accuracy (acc) below the base (0.02: 2 points)",
    )


class GatesSpec(Bounds):
    quantized: Bounds | None = Field(
        default=None,
        description="bounds of their own for the quantized outputs (publish.quantize), against the unquantized "
        "base: an output is published only if it and each of its quantized copies pass",
        examples=[{"max_ppl_increase": {"wikitext2": 0.30}}],
    )
    _dump = model_serializer(mode="wrap")(without_none("quantized"))  # stored and hashed as before it existed


def unmeasured(
    gates: Mapping[str, Mapping[str, float]],
    perplexity: Iterable[str],
    tasks: Iterable[str],
    prefix: tuple = ("body", "gates"),
) -> list[dict]:
    """A validation error for each gate whose metric the evaluation does not measure (empty: all are)."""
    measured = {
        "max_ppl_increase": (set(perplexity), "evaluation.perplexity", "corpus"),
        "max_acc_drop": (set(tasks), "evaluation.tasks", "task"),
    }
    errors = []
    for kind, (names, where, what) in measured.items():
        for name in gates.get(kind) or {}:
            if name not in names:
                errors.append(
                    {
                        "loc": [*prefix, kind, name],
                        "type": "gate_not_measured",
                        "input": name,
                        "msg": f"gates.{kind}.{name}: the {what} {name!r} is not measured; add it to "
                        f"{where} (measured: {', '.join(sorted(names)) or 'none'})",
                    }
                )
    return errors


def gate_errors(spec) -> list[dict]:
    """The job request's (a schemas.JobCreate) unmeasured gates, the quantized outputs' included."""
    if spec.gates is None:
        return []
    ev, gates = spec.evaluation, spec.gates.model_dump()
    tasks = [*ev.tasks, *(f.name for f in ev.task_files)]
    errors = unmeasured(gates, ev.perplexity, tasks)
    if gates.get("quantized"):
        errors += unmeasured(gates["quantized"], ev.perplexity, tasks, prefix=("body", "gates", "quantized"))
    return errors
