"""The selection stage of a measured criterion (greedy, auto) or of `k: auto`: which layers, scored on the
selection data, never on the evaluation's.

Selection data: the request's (`cfg.selection`, cut into blocks of the calibration's length; when it is the
calibration's own dataset, the blocks that follow the calibration's), else the calibration's held-out tenth,
which the result then calls in-distribution. Maps come from the cached sums:
on the held-out tenth, from the other blocks' sums (the maps must not have seen the blocks that score them);
on separate selection data, from all the sums, as the outputs' maps are. No calibration forward pass.
"""

from __future__ import annotations

from worker.engine.calibration.data import load_texts, make_blocks
from worker.engine.calibration.stage import CalibrationResult, Report, layer_source
from worker.engine.config import CompressConfig
from worker.engine.loading.load import LoadedModel, load_weights
from worker.engine.placement import max_memory_for
from worker.engine.scoring.stage import fit_maps
from worker.engine.selection.auto_k import Chooser, expected_sets
from worker.engine.selection.set_loss import SetLoss


def selection_data(cfg: CompressConfig, lm: LoadedModel, cal: CalibrationResult):
    """(blocks, what the result says of them, the sums' split the maps are fitted on)."""
    if cfg.selection is None:
        if len(cal.held_blocks) == 0:
            raise ValueError(
                f"criterion {cfg.criterion!r} and k auto need selection data: give a selection "
                "dataset, or calibrate on at least 2 blocks so a tenth is held out"
            )
        data = {
            "source": "calibration held-out",
            "in_distribution": True,
            **cfg.dataset.key(),
            "num_samples": len(cal.held_blocks),
        }
        return cal.held_blocks, data, "fit"
    same = cfg.selection == cfg.dataset
    if same:  # the calibration's own data: the blocks after the calibration's, in its order, which no map has seen
        blocks = make_blocks(
            load_texts(cfg.selection, cfg.data_dir),
            lm.tokenizer,
            cfg.num_samples + cfg.selection_samples,
            cfg.seq_len,
            cfg.shuffle,
            cfg.seed,
        )[cfg.num_samples :]
    else:
        blocks = other_text_blocks(cfg, lm.tokenizer)
    data = {
        "source": "selection dataset",
        "in_distribution": same,
        **cfg.selection.key(),
        "num_samples": cfg.selection_samples,
    }
    return blocks, data, None


def other_text_blocks(cfg: CompressConfig, tokenizer):
    """The blocks of a selection dataset that is not the calibration's (the selection scores sets on them, and
    they guard a heal: refine_stage.Refiner.guard)."""
    return make_blocks(load_texts(cfg.selection, cfg.data_dir), tokenizer, cfg.selection_samples, cfg.seq_len)


def selection_stage(
    cfg: CompressConfig, lm: LoadedModel, cal: CalibrationResult, scores: list[dict], report: Report
) -> tuple[dict[int, tuple[list[int], str]], dict]:
    """k -> (layers, the criterion that chose them), and the `selection` record (auto_k.Chooser.record)."""
    expected = expected_sets(
        cfg.criterion, cfg.ks, cal.stats.num_layers, cfg.greedy_width, cfg.max_ppl_increase is not None
    )
    report("select", 0.0, f"measuring about {expected} layer sets on the selection data")
    blocks, data, split = selection_data(cfg, lm, cal)
    if max_memory_for(lm.path, cfg.devices) is None:  # fits the first device (or the CPU's host)
        load_weights(lm)  # the sets' losses walk the layers many times: the weights stay in memory
    # else larger than the device: every set reads its layers from the checkpoint again (slower, but no
    # device holds more than a layer; service/estimates prices it)
    set_loss = SetLoss(
        layer_source(lm),
        blocks,
        cfg.mode,
        cfg.method,
        lambda i: fit_maps(cal.stats, cfg.mode, [i], cfg.ridge, split=split)[i],
        batch_size=cal.meta.get("batch_size", 1),
    )

    set_loss.on_set = lambda done: report(
        "select",
        min(done / expected, 0.99),  # done counts the base
        f"{done} layer sets measured (about {expected} expected)",
    )
    chooser = Chooser(scores, cfg.mode, cfg.criterion, set_loss, set_loss.base, cfg.greedy_width)
    ks = [chooser.auto_k(cfg.max_ppl_increase)] if cfg.max_ppl_increase is not None else list(cfg.ks)
    chosen = {k: chooser.layers(k) for k in ks}
    return chosen, chooser.record(data, set_loss.tokens, chosen)
