"""The estimate as the API answers it (POST /v1/estimates) and stores it on a job (jobs.estimate)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class DiskOut(BaseModel):
    download: int = Field(description="the input checkpoint as stored on the Hub")
    spill: int = Field(description="hidden states past NBL_HOST_CACHE_BYTES, under NBL_HOME/spill")
    stats_cache: int = Field(description="one float64 shard of sums per layer (the statistics cache)")
    outputs: int = Field(description="one saved checkpoint per k")
    quantized: int = Field(
        0,
        description="publish.quantize's copies: each output's per scheme, and the base's when the job evaluates "
        "(removed after the evaluation)",
    )
    offload: int = Field(
        0,
        description="weights accelerate offloads to disk when a whole model is larger than the "
        "devices and half the host; a worker class with any is not chosen",
    )


class PhaseOut(BaseModel):
    device: int
    host: int


class EstimateOut(BaseModel):
    object: str = "estimate"
    device_bytes: int = Field(description="peak memory on one device (0 when the job runs on the CPU)")
    host_bytes: int = Field(description="peak host memory")
    disk_bytes: int = Field(description="the sum of `disk`")
    disk: DiskOut
    seconds: list[float] = Field(
        description="[fast, slow] wall time on `devices`, download included", min_length=2, max_length=2
    )
    worker_class: str | None = Field(
        description="the queue of the smallest worker class that holds the job; "
        "null when none does (`refusal` says why; POST /v1/jobs answers 422)"
    )
    devices: list[str]
    dtype: str
    batch_size: int
    phases: dict[str, PhaseOut] = Field(
        description="calibrate: layer by layer; select: measured selection "
        "(greedy, auto, k auto); save: tensor by tensor; check: each output reloaded "
        "in a fresh process; quantize: llm-compressor's process (publish.quantize), the whole model on the host; "
        "evaluate: the base and each output (and each quantized model), one at a time. A "
        "whole model larger than one device is spread over the GPUs and the host"
    )
    refusal: str | None = None
    basis: str | None = Field(
        None,
        description="measured: `seconds` and `stages` from the rates this worker class "
        "measured on jobs of the same model shape and kind of work (a range from the spread of "
        "those measurements, at most 2x wide); model: from FLOP "
        "counts and the slowest and fastest hardware of the class (wide)",
    )
    stages: dict[str, dict[str, Any]] | None = Field(
        None,
        description="measured basis: each stage's time, "
        "{seconds, low, high, measured, kind} (measured false: the class's rate over "
        "its other stages; kind: the work the stage will do, e.g. a `cached` calibration or a "
        "`gguf:Q4_K_M` export, a `quant:w4a16+quant:w8a8` quantization), load's `warm` and evaluate's "
        "`base_cached`; `fetch` (reading the weights the first time: a "
        "download, or hashing a local model) for a model the class has "
        "not loaded, once it measured a fetch; null on the model basis",
    )
    base_evaluation_cached: bool | None = Field(
        None,
        description="the worker class holds the base model's "
        "evaluation for this model and evaluation section (an earlier job "
        "made it): only the outputs' evaluation is priced",
    )
    statistics_cached: bool | None = Field(
        None,
        description="the worker class holds this calibration's statistics (an earlier job on the same "
        "model and calibration section made them): calibration is priced as a read of the cache",
    )
    warm_load: bool | None = Field(
        None,
        description="an earlier job of the class loaded this model: its weights "
        "are on the class's disk and hashed, so no `fetch` is priced",
    )
    worker_hours: list[float] | None = Field(None, description="`seconds` in hours, low and high")
    gpu_hours: list[float] | None = Field(None, description="worker-hours times the class's GPUs")
    cost: list[float] | None = Field(
        None, description="worker-hours times the class's price (NBL_CLASS_PRICES); null when the operator set none"
    )
    shape: dict[str, Any] | None = Field(
        None,
        description="the model's shape from its config.json (architecture, "
        "model_type, layers, hidden_size, ..., params), as GET /v1/models lists it",
    )
