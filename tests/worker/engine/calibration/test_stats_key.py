"""The statistics cache's key names the prefix every calibration block opens with, only when there is one."""

from worker.engine.calibration import stats_cache
from worker.engine.calibration.data import DatasetSpec
from worker.engine.calibration.stage import stats_key
from worker.engine.config import CompressConfig


def test_the_key_changes_with_a_prefix_and_keeps_its_old_value_without():
    cfg = CompressConfig(model="m", dataset=DatasetSpec("c4"), ks=[2])
    key = stats_key(cfg, "dir:abc", "torch.float32", "float32")
    # the fields the key named before blocks opened with a prefix: a tokenizer adding nothing keeps its entries
    assert key == stats_cache.cache_key(
        model="dir:abc",
        dataset=cfg.dataset.key(),
        num_samples=cfg.num_samples,
        seq_len=cfg.seq_len,
        seed=cfg.seed,
        shuffle=cfg.shuffle,
        dtype="torch.float32",
        holdout_fraction=cfg.holdout_fraction,
        product_dtype="float32",
    )
    assert stats_key(cfg, "dir:abc", "torch.float32", "float32", (2,)) != key  # Gemma's <bos>: a new entry


def test_the_criterion_is_not_in_the_key():
    """The sums do not depend on how layers are ranked: a job under the new default (cosine) reuses an entry made
    under the old one (cca), and switching criterion never calibrates again."""
    keys = {
        stats_key(CompressConfig(model="m", dataset=DatasetSpec("c4"), ks=[2], criterion=c), "dir:abc", "f32", "f32")
        for c in ("cca", "cosine", "nmse", "greedy", "auto")
    }
    assert len(keys) == 1
