"""The real SmolLM2-135M: calibrate on C4 (c4_demo), then WikiText-2 perplexity of Attn NBL-k and
Attn DROP-k. Slow (about a minute on 2 cores), so marked; CI runs it."""

import math

import pytest
from testkit.models import DATA_DIR, load_smollm2

from worker.engine.calibration.data import DatasetSpec
from worker.engine.calibration.stage import calibration_stage
from worker.engine.config import CompressConfig
from worker.engine.forms.surgery import Plan, replaced
from worker.engine.scoring.stage import fit_maps, score_stage
from worker.engine.selection.criteria import choose
from worker.eval.perplexity import corpus_text, perplexity

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2(smollm2_home):
    return load_smollm2(smollm2_home)  # the GGUF is converted once per session


def test_smollm2_nbl_beats_drop_on_wikitext2(smollm2, tmp_path):
    lm = smollm2
    assert lm.family == "llama" and len(lm.model.model.layers) == 30 and lm.model.config.hidden_size == 576
    cfg = CompressConfig(
        model="smollm2",
        dataset=DatasetSpec("c4"),
        ks=[4],
        num_samples=16,
        seq_len=256,
        stats_dir=tmp_path,
        data_dir=DATA_DIR,
    )
    cal = calibration_stage(cfg, lm, progress=False)
    assert cal.meta["tokens"] == 16 * 256
    scores = score_stage(cal.stats)
    assert all(math.isfinite(s["attn"]["cca_bound"]) and 0 <= s["attn"]["nmse"] for s in scores)

    text = corpus_text("wikitext2", DATA_DIR)
    ppl = lambda: perplexity(lm.model, lm.tokenizer, text, window=512, max_tokens=4096, progress=False)["ppl"]  # noqa: E731
    base = ppl()
    assert 5 < base < 100, base  # a trained model, not noise (vocab 49152)
    table = {}
    for k in (4, 8):
        layers = choose(scores, "attn", "cca", k)
        for method in ("nbl", "drop"):
            maps = fit_maps(cal.stats, "attn", layers) if method == "nbl" else {}
            with replaced(lm.model, Plan("attn", method, tuple(layers)), maps):
                table[(method, k)] = ppl()
    print(
        "\nWikiText-2 ppl (4096 tokens, window 512): base",
        round(base, 2),
        {f"{m}-{k}": round(v, 2) for (m, k), v in table.items()},
    )
    for k in (4, 8):
        assert base < table[("nbl", k)] < table[("drop", k)], table
