"""The measured selection of a job, as GET /v1/jobs/{id} shows it (`selection`) and `nbl compress --json` prints
it: which criterion won at each k and why, that is the held-out table of every layer set tried."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)


class TriedSet(_Out):
    k: int
    criterion: str = Field(description="cca, cosine, nmse or greedy: whose layer set this is")
    layers: list[int]
    heldout_ppl: float | None = Field(description="perplexity of the selection data with these layers replaced")


class ChosenSet(_Out):
    k: int
    criterion: str = Field(description="the criterion whose set had the lowest selection perplexity")
    layers: list[int]
    # nbl/selection/rise_error.py: from the paired per-block losses (absent from jobs run before they were kept)
    rise: float | None = Field(default=None, description="relative perplexity rise over the base on the selection data")
    rise_se: float | None = Field(
        default=None, description="its standard error (paired over blocks); null on one block"
    )
    sd_per_token: float | None = Field(default=None, description="the spread of the paired loss differences per token")
    blocks: int | None = Field(default=None, description="selection blocks the error is measured over")


class GreedyStep(_Out):
    added: int
    heldout_ppl: float | None


class SelectionOut(_Out):
    criterion: str = Field(description="the criterion that won (one output), or the one asked for")
    k: int | list[int]
    data: dict[str, Any] = Field(
        description="the selection data: the request's dataset, or the calibration's "
        "held-out tenth (`in_distribution`: true)"
    )
    tokens: int = Field(description="tokens scored per layer set")
    base_ppl: float | None = Field(description="the unmodified model's perplexity on the selection data")
    chosen: list[ChosenSet]
    tried: list[TriedSet] = Field(description="every layer set measured, with k auto every k it tried")
    greedy_steps: list[GreedyStep] = Field(default_factory=list)
