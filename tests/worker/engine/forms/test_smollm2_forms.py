"""The real SmolLM2-135M written in forms fold (block: stock Llama, 28 layers) and linear (attn: DeciLM), each
reloaded from disk: 3 prompts x 16 greedy tokens identical to the compressed model in memory (fp32)."""

import json

import pytest
import torch
from testkit.models import DATA_DIR, load_smollm2

from worker.engine.calibration.data import DatasetSpec
from worker.engine.calibration.stage import calibration_stage
from worker.engine.config import CompressConfig
from worker.engine.forms.fold_runs import fit_form_maps
from worker.engine.forms.form_layers import apply_form
from worker.engine.forms.saving_forms import write_form
from worker.engine.forms.surgery import Plan
from worker.engine.scoring.stage import layer_reader
from worker.engine.selection.criteria import choose

pytestmark = pytest.mark.slow
PROMPTS = ["The capital of France is", "def fibonacci(n):", "Once upon a time"]


@pytest.fixture(scope="module")
def smollm2(smollm2_home):
    return load_smollm2(smollm2_home)


def _greedy(model, tok):
    out = []
    for p in PROMPTS:
        ids = tok(p, return_tensors="pt")
        with torch.no_grad():
            g = model.generate(**ids, max_new_tokens=16, min_new_tokens=16, do_sample=False)
        out.append(g[0, ids["input_ids"].shape[1] :].tolist())
    return out


@pytest.mark.parametrize("form,mode,k", [("fold", "block", 2), ("linear", "attn", 4)])
def test_smollm2_form_reloads_token_exact(form, mode, k, smollm2, tmp_path):
    import copy

    from transformers import AutoModelForCausalLM

    lm = smollm2
    cfg = CompressConfig(
        model="smollm2",
        dataset=DatasetSpec("c4"),
        ks=[k],
        num_samples=8,
        seq_len=256,
        mode=mode,
        form=form,
        stats_dir=tmp_path / "stats",
        data_dir=DATA_DIR,
    )
    cal = calibration_stage(cfg, lm, progress=False)
    layers = choose(cal.scores, mode, "cosine", k)
    plan = Plan(mode, "nbl", tuple(layers), form)
    maps = fit_form_maps(layer_reader(cal.stats)[1], form, mode, layers)
    out = write_form(lm.path, plan, maps, torch.float32, lm.tokenizer, tmp_path / "out", lm.family, {"layers": []})
    model = copy.deepcopy(lm.model)
    apply_form(model, plan, maps)
    want = _greedy(model, lm.tokenizer)
    if form == "fold":  # the base's own class: no remote code anywhere
        assert json.loads((out / "config.json").read_text())["num_hidden_layers"] == 30 - k
        assert not list(out.glob("*.py"))
        re = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    else:
        re = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, trust_remote_code=True)
    assert _greedy(re.eval(), lm.tokenizer) == want
    cal.cleanup()
