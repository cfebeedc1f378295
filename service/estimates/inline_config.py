"""POST /v1/estimates for a model that is not on the Hub nor on this server: the body carries the model's
config.json as an inline `config` object, and the estimate is made from it exactly as from a fetched one (the
same bounds, the same request checks, the same placement), as `nbl estimate --model DIR` sizes a directory's.
Its size is bounded by the body's (service/http: a 413 past it). Nothing is stored, so the model id is only the name the answer is given under (its measured rates and caches
are those of that id)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from nbl.request import JobCreate


class EstimateCreate(JobCreate):
    config: dict[str, Any] | None = Field(
        default=None,
        description="the model's config.json as an object, for a model not on the Hub (nor a `local:NAME` "
        "here): estimated from it instead of fetching one; `model.id` then only names it",
        examples=[{"model_type": "llama", "num_hidden_layers": 30, "hidden_size": 576}],
    )
