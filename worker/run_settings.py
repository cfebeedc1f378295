"""What a run takes from the Settings: the directories (Paths) and this machine's limits (Options) of
worker/pipeline_io.py, built here once for a job (worker/tasks.py) and for `nbl compress` (cli/compress.py).
The pipeline and the engine read no Settings: these are how the Settings reach them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from service.core.settings import Settings

from .errors import RetryPolicy
from .pipeline_io import Options, Paths


def run_paths(settings: Settings, work_dir: Path | None, **given: Any) -> Paths:
    """The Settings' directories; `given` fields (publish_dir, stats_cache, eval_cache, ...) win."""
    fields: dict[str, Any] = dict(
        work_dir=work_dir,
        stats_dir=settings.stats_dir,
        stats_cache=settings.stats_cache_max_bytes > 0,
        spill_dir=settings.spill_dir,
        data_dir=settings.data_dir,
        models_dir=settings.models_dir,
        home=settings.home,
        gguf_python=settings.gguf_python,
        quant_python=settings.quant_python,
    )
    return Paths(**{**fields, **given})


def run_options(settings: Settings, **given: Any) -> Options:
    """The Settings' devices and limits; `given` fields (a flag of `nbl compress`) win, None included."""
    fields: dict[str, Any] = dict(
        devices=settings.devices,
        max_model_bytes=settings.max_model_bytes,
        host_cache_bytes=settings.host_cache_bytes,
        check_timeout_s=settings.load_check_timeout_s,
        greedy_width=settings.greedy_width,
        retry=RetryPolicy(settings.hub_attempts, settings.hub_backoff_s),
    )
    return Options(**{**fields, **given})
