"""What the pipeline (worker/pipeline.py) is handed and hands back: where its results go (a `Sink`, which
cancels it by raising `Cancelled`), where it writes and reads (`Paths`) and within which limits this machine
runs it (`Options`), both built from the Settings by worker/run_settings.py or from `nbl compress`'s flags, and
what a run returns (`PipelineResult`). Apart from the pipeline's stages, so that a stage and a sink name them
without importing the pipeline that runs the stages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from nbl.selection.score_fields import GREEDY_WIDTH

from .engine import compress
from .errors import RetryPolicy
from .publish.destination import Published
from .quant.stage import Quantized


class Cancelled(Exception):
    """Raised by a sink when the job's cancellation was requested."""


class Sink(Protocol):
    """Where the pipeline's results go: the job's rows (worker/tasks.py DbSink) or the terminal
    (cli/console_sink.py). Every result goes through it, nothing else is written by the pipeline."""

    def progress(self, stage: str, fraction: float, message: str) -> None: ...
    def metrics(self, variant: str, values: dict[str, float]) -> None: ...
    def warning(self, message: str) -> None: ...
    def layer_scores(self, scores: list[dict]) -> None: ...
    def selection(
        self,
        mode: str,
        selected: dict[int, list[int]],
        measured: dict | None = None,
        family: str | None = None,
        dtypes: dict[int, str] | None = None,
    ) -> None: ...
    def output(self, k: int, layers: list[int], published: Published) -> None: ...
    def estimate(self, figures: dict) -> None: ...
    def gates(self, result: dict) -> None: ...

    # optional: replan(costs) receives each stage's expected cost once the model is loaded (progress.plan),
    # and again when the base's evaluation came from the cache (the outputs' evaluation alone);
    # loaded(fetched) learns whether the load found the weights read before, else how long fetching them took
    # a job's: begin_publish() records that publishing began, or raises Cancelled when a cancel came first
    # (worker/publish/stage.py; from then on the API refuses a cancel); should_stop() raises Cancelled on a
    # cancel, polled while a subprocess runs (the load check, the GGUF export)


@dataclass
class Paths:
    work_dir: (
        Path | None
    )  # where outputs are written before publishing (None: score only, `nbl compress` without --out)
    publish_dir: Path | None = None  # local publishing destination (jobs)
    stats_dir: Path | None = None  # the statistics cache (None: none, a run's sums go to the temp dir)
    stats_cache: bool = (
        True  # False (NBL_STATS_CACHE_MAX_BYTES=0, --no-cache): a run's sums under stats_dir, then removed
    )
    eval_cache: bool = True  # the base's evaluation is cached per model and spec (False: --no-cache)
    # The rest of the worker's Settings the engine and evaluation need, passed down (they read none).
    spill_dir: Path | None = None  # hidden states past host_cache_bytes
    data_dir: Path | None = None  # the shipped data sets (c4, wikitext2, the evaluation tasks)
    models_dir: Path | None = None  # where a GGUF input is converted
    home: Path | None = None  # the digest memo and the base-evaluation cache
    gguf_python: Path | None = None  # the GGUF venv's python (publish.formats gguf:*; None: the checkout's)
    quant_python: Path | None = None  # the quantization venv's python (publish.quantize; None: the checkout's)


@dataclass
class Options:
    """How this machine runs a recipe: the worker's Settings, or `nbl compress`'s flags. The recipe says what
    to do; these say where and within which limits."""

    devices: str | None = None  # Settings.devices / --devices (None: every visible GPU, else the CPU)
    device: str | None = None  # --device: one device (as devices with one)
    dtype: str = "auto"
    batch_size: int | None = None
    product_dtype: str = "auto"  # per-batch products: tf32 on a GPU, else float32 (the sums are float64 always)
    max_model_bytes: int | None = None  # the largest input model (None: no limit)
    host_cache_bytes: int | None = None  # hidden states kept in memory between layers (None: no limit)
    check_timeout_s: float = 900  # the fresh-process load check of each output
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    fit_check: bool = True  # a job's estimate must fit this worker's devices before anything is downloaded
    load_check: bool = True  # reload each output in a fresh process before it counts (`nbl compress --no-load-check`)
    local_paths: bool = False  # the model may be a path on this machine (`nbl compress`; a job's may not)
    private_hub: bool = False  # a private Hub repo may be read (`nbl compress`: its user's token; a job's is shared)
    progress: bool = False  # tqdm bars on stderr, beside the sink (a terminal)
    greedy_width: int = GREEDY_WIDTH  # the greedy criterion's candidates per step (Settings.greedy_width)


@dataclass
class PipelineResult:
    selected: dict[int, list[int]] = field(default_factory=dict)  # k -> layers
    outputs: dict[int, Published] = field(default_factory=dict)  # k -> where it was published
    calibration: dict = field(default_factory=dict)
    compressed: compress.CompressResult | None = None  # the engine's report: scores, outputs, timings
    evaluation: dict[str, dict] = field(default_factory=dict)  # variant ("base", "k4") -> its nested result
    checks: dict[int, dict] = field(default_factory=dict)  # k -> the load check's figures (loadcheck.check)
    quantized: Quantized = field(default_factory=Quantized)  # publish.quantize's copies (worker/quant/stage.py)
