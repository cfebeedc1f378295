"""What one compression run is asked to do: the model, the calibration data, the k values, the method.

The engine's form of a Recipe (nbl/recipe.py, where the defaults live) plus the machine's
directories and limits; `from_recipe` builds it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nbl import recipe as R
from nbl.outputs.forms import request_error
from nbl.refine_schema import REFIT, refine_error
from worker.engine.calibration.data import DatasetSpec
from worker.engine.calibration.products import PRODUCTS
from worker.engine.calibration.stats import BRANCHES
from worker.engine.forms.shard_writer import MAX_SHARD_SIZE
from worker.engine.scoring.scores import DEFAULT_RIDGE
from worker.engine.selection.auto_k import MEASURED
from worker.engine.selection.criteria import CRITERIA
from worker.engine.selection.greedy import DEFAULT_WIDTH


@dataclass
class CompressConfig:
    model: str
    dataset: DatasetSpec
    ks: list[int]
    out: Path | None = None
    revision: str | None = None
    num_samples: int = R.NUM_SAMPLES
    seq_len: int = R.SEQ_LEN
    seed: int = R.SEED
    shuffle: bool = False
    mode: str = R.MODE
    method: str = R.METHOD
    criterion: str = R.CRITERION
    form: str = R.FORM  # nbl/outputs/forms.py
    dtype: str | None = None
    out_dtype: str | None = None  # the saved weights' (out_dtype.py): None the compute dtype, auto the base's
    device: str | None = None
    devices: list[str] | None = None  # several: data-parallel calibration, one process each (distributed.py)
    batch_size: int | None = None
    holdout_fraction: float = 0.1
    ridge: float = DEFAULT_RIDGE
    # Measured selection (auto_k.py): its data (None: the calibration's held-out tenth), the greedy's candidates
    # per step, and k auto's budget (set: ks is ignored, the largest k within it is found)
    selection: DatasetSpec | None = None
    selection_samples: int = R.SELECTION_SAMPLES
    greedy_width: int = DEFAULT_WIDTH
    max_ppl_increase: float | None = None
    refit: str = REFIT  # none | sequential: the chosen layers' maps refitted in depth order (refit.py)
    heal: R.Heal | None = None  # the maps trained against the base's next-token distribution (heal.py)
    product_dtype: str = "auto"  # the per-batch products: auto (tf32 on a GPU, else float32), float32, tf32, float64
    # Directories and limits come from the caller (Settings at the top); the engine reads no variable.
    stats_dir: Path | None = None  # the statistics cache (None: none; the run's sums go to a temporary directory)
    use_cache: bool = True
    max_model_bytes: int | None = None  # refuse larger input weights (None: no limit)
    host_cache_bytes: int | None = None  # hidden states past this go to disk (None: no limit)
    spill_dir: Path | None = None  # where they go (None: 'spill' beside the statistics directory)
    data_dir: Path | None = None  # the shipped data sets that `c4` and `wikitext2` name (None: the Hub)
    models_dir: Path | None = None  # where a GGUF input is converted
    home: Path | None = None  # where local weights' digests are memoised (None: hashed every time)
    max_shard_size: int | str = MAX_SHARD_SIZE  # an output's safetensors shards, as save_pretrained's argument

    def check(self) -> None:
        """Checks that need no model; k against the layer count is checked after loading."""
        if self.mode not in BRANCHES:
            raise ValueError(f"mode must be one of {BRANCHES}, got {self.mode!r}")
        if self.method not in R.METHODS:
            raise ValueError(f"method must be 'nbl' or 'drop', got {self.method!r}")
        if self.criterion not in CRITERIA + MEASURED:
            raise ValueError(f"criterion must be one of {CRITERIA + MEASURED}, got {self.criterion!r}")
        if self.max_ppl_increase is not None and not self.max_ppl_increase > 0:
            raise ValueError(f"max_ppl_increase must be positive, got {self.max_ppl_increase}")
        if not self.ks and self.max_ppl_increase is None:
            raise ValueError("give at least one k, or k auto with a budget")
        if any(k <= 0 for k in self.ks):
            raise ValueError(f"k must be positive, got {self.ks}")
        why = request_error(self.form, self.mode, self.method, self.criterion, self.max_ppl_increase is not None)
        if why is not None:
            raise ValueError(why)
        why = refine_error(self.form, self.method, self.refit, self.heal is not None)
        if why is not None:
            raise ValueError(why)
        if self.product_dtype not in PRODUCTS:
            raise ValueError(f"product_dtype must be one of {', '.join(PRODUCTS)}")


def from_recipe(recipe: R.Recipe, model: str | None = None, **machine) -> CompressConfig:
    """The engine's config of `recipe`; `model`: where to read it (a job's local:NAME resolved to its
    directory), default the recipe's; `machine`: out, dtype, device, directories and limits."""
    cal, comp, sel = recipe.calibration, recipe.compression, recipe.selection
    if sel is not None:
        machine.setdefault("selection", DatasetSpec(sel.dataset, sel.config, sel.split, sel.text_field))
        machine.setdefault("selection_samples", sel.num_samples)
    if comp.max_ppl_increase is not None:
        machine.setdefault("max_ppl_increase", comp.max_ppl_increase)
    return CompressConfig(
        model=model or recipe.model,
        revision=recipe.revision,
        dataset=DatasetSpec(cal.dataset, cal.config, cal.split, cal.text_field),
        ks=list(comp.ks),
        num_samples=cal.num_samples,
        seq_len=cal.seq_len,
        seed=cal.seed,
        shuffle=cal.shuffle,
        mode=comp.mode,
        method=comp.method,
        criterion=comp.criterion,
        form=comp.form,
        refit=comp.refit,
        heal=comp.heal,
        **machine,
    )
