"""The pipeline's load stage: the model's config checked against the request (preflight.py), then the model
located, checked and its tokenizer loaded (engine/loading/load.py), each retried while the Hub is away.

It is never silent: its first event says which Hub it contacts for which model and revision, and each
retry is a warning that says why and when it tries again (a warning, not a progress message: those are
written at most once a second, and a refused connection fails at once). A job showed "load 0 %" for two
minutes with no event when the Hub could not be reached; how long it waits is bounded by
engine/loading/hub_access.py.
"""

from __future__ import annotations

import time
from pathlib import Path

from . import preflight
from .engine.loading.hub_access import contacting
from .engine.loading.hub_ids import looks_like_hub_id
from .engine.loading.load import LoadedModel, load_model
from .fetch import Fetched, fetch


def is_hub_model(source: str) -> bool:
    """What the loader will fetch from the Hub: a Hub id that is no path on this machine."""
    return looks_like_hub_id(source) and not Path(source).expanduser().exists()


def load(recipe, cfg, options, sink) -> tuple[LoadedModel, float, Fetched]:
    """(the model, its tokenizer and no weight yet; the seconds the loader took, its fetch included; the
    fetch: whether the weights were read before on this machine, else how long downloading or hashing them
    took, worker/fetch.py). A job's estimate must fit this worker's devices (`options.fit_check`,
    preflight.fits) before anything is downloaded; the figures go to `sink.estimate`."""
    name = recipe.model  # as the job names it (local:NAME), never a server path
    hub = is_hub_model(cfg.model)
    sink.progress("load", 0.0, f"loading {name}" + (f": {contacting(cfg.model, cfg.revision)}" if hub else ""))
    figures: dict = {}  # the job's estimate on this worker's devices, checked before anything is downloaded
    fit = (
        (
            lambda config: figures.update(
                preflight.fits(
                    name,
                    config,
                    recipe,
                    options.devices,  # noqa: E731
                    options.host_cache_bytes,
                )
            )
        )
        if options.fit_check
        else None
    )
    options.retry.run(
        lambda: preflight.check(name, cfg.model, cfg.revision, cfg.ks, cfg.seq_len, fit, cfg.form, cfg.mode),
        "reading the model's config",
        on_retry=sink.warning,
    )
    if figures:
        sink.estimate(figures)  # kept on the job when the API could not size it (a Hub model, offline)
    start = time.perf_counter()
    fetched = options.retry.run(
        lambda: fetch(cfg.model, cfg.revision, hub, cfg.home, cfg.max_model_bytes, options.private_hub),
        "fetching the model's weights",
        on_retry=sink.warning,
    )
    lm = options.retry.run(
        lambda: load_model(
            cfg.model,
            cfg.revision,
            cfg.dtype,
            cfg.device,
            max_bytes=cfg.max_model_bytes,
            weights=False,
            models_dir=cfg.models_dir,
            home=cfg.home,
            private_ok=options.private_hub,
        ),
        "loading the model",
        on_retry=sink.warning,
    )
    return lm, time.perf_counter() - start, fetched
