"""What of a job's (or `nbl compress`'s) options changes its estimate (nbl/sizing/model.py), and the counts the
engine derives from them that its memory and its time both follow: blocks per batch, held-out blocks, and
whether selection measures layer sets, on how many blocks. Each count is the engine's own, restated without
torch (tests/nbl/sizing/test_estimate_model.py keeps them equal).
"""

from __future__ import annotations

from dataclasses import dataclass

from nbl.recipe import CRITERION
from nbl.selection.score_fields import GREEDY_WIDTH, MEASURED


@dataclass(frozen=True)
class Options:
    """The job's (or `nbl compress`'s) options that change the figures."""

    num_samples: int = 256
    seq_len: int = 2048
    batch_size: int | None = None  # blocks per batch; None: calibration_stage.default_batch_size
    mode: str = "attn"
    method: str = "nbl"
    criterion: str = CRITERION
    form: str = "nbl"  # fold keeps MLP outputs in the hidden cache and, in block mode, lag sums (form_taps.py)
    ks: tuple[int, ...] = (4,)
    dtype: str = "auto"  # float32 on CPU, bfloat16 on GPU (engine/loading/load.resolve_dtype)
    save_dtype: str | None = None  # the outputs' (publish.dtype): auto the base's stored one; None the computed one
    stats_precision: str = "auto"  # the products' precision: auto and tf32 are float32 buffers
    host_cache_bytes: int | None = None  # None: no limit, nothing spilt
    outputs: bool = True  # saved outputs (a job always; `nbl compress` with --out)
    whole_model: bool = True  # evaluated: the base and each output loaded whole (a job; `nbl compress --eval`)
    load_check: bool = True  # each saved output reloaded in a fresh process (`nbl compress --no-load-check`)
    k_auto: bool = False  # k found by measurement (ks holds one k, the output it makes)
    selection_samples: int | None = None  # blocks measured selection scores sets on (None: the held-out tenth)
    greedy_width: int = GREEDY_WIDTH
    perplexity: tuple[str, ...] = ()
    eval_max_tokens: int | None = None
    tasks: tuple[str, ...] = ()
    eval_limit: int | None = None
    holdout_fraction: float = 0.1
    refit: str = "none"  # compression.refit: a pass of the calibration blocks per output, calibration's memory
    heal: object | None = None  # compression.heal (nbl.recipe.Heal): the whole model, trained maps (refine.py)
    quantize: tuple[str, ...] = ()  # publish.quantize (`nbl compress --quantize`): each output per scheme (quant.py)
    quantized_eval: bool = False  # the base is quantized too, and each quantized model evaluated (a job that evaluates)


def default_batch_size(seq_len: int, on_gpu: bool) -> int:
    """As worker/engine/calibration/stage.default_batch_size (a test keeps the two equal)."""
    return max(1, (16384 if on_gpu else 2048) // seq_len)


def holdout_count(num_blocks: int, fraction: float) -> int:
    """As worker/engine/calibration/calibrate.holdout_count."""
    if fraction <= 0 or num_blocks < 2:
        return 0
    return max(1, int(num_blocks * fraction))


def measured(opts: Options) -> bool:
    """Selection by measurement on the selection data (selection/stage.py)."""
    return opts.criterion in MEASURED or opts.k_auto


def selection_blocks(opts: Options) -> int:
    """As worker/engine/selection/stage.selection_data: the named data's blocks, else the held-out tenth."""
    return opts.selection_samples or holdout_count(opts.num_samples, opts.holdout_fraction)
