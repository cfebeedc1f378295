"""Surgery, the KV cache of replaced layers, and self-contained saving, for every supported family."""

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors import safe_open
from testkit.models import FAMILY_CONFIGS, FAST_FAMILIES, family_param, runs_slow, tiny_model, tiny_tokenizer

from worker.engine.calibration.calibrate import calibrate
from worker.engine.forms import surgery
from worker.engine.forms.saving import save_compressed
from worker.engine.scoring.stage import fit_maps

FAMILIES = sorted(FAMILY_CONFIGS)

RELOAD = textwrap.dedent(
    """
    import sys, torch
    sys.modules["worker"] = None  # prove the outputs need nothing of ours: only torch + transformers
    from transformers import AutoModelForCausalLM
    ids = torch.load(sys.argv[1])
    results = {}
    for path in sys.argv[3:]:
        m = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True, dtype=torch.float32).eval()
        with torch.no_grad():
            logits = m(ids).logits
            gen = m.generate(ids[:1, :6], max_new_tokens=12, do_sample=False, min_new_tokens=12)
        results[path] = {"logits": logits, "gen": gen, "cls": type(m).__name__}
    torch.save(results, sys.argv[2])
    """
)
CASES = [
    (f, mode, method)
    for f in FAMILIES
    for mode, method in [("attn", "nbl"), ("block", "nbl"), ("attn", "drop"), ("block", "drop")]
]
PARAMS = [family_param(*case) for case in CASES]


def _kv_bytes(cache) -> int:
    total = 0
    for layer in cache.layers:
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


def _greedy(model, ids, use_cache):
    return model.generate(ids, max_new_tokens=12, min_new_tokens=12, do_sample=False, use_cache=use_cache)


@pytest.fixture(scope="module")
def blocks():
    return torch.randint(2, 100, (8, 24), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def compressed(blocks, tmp_path_factory, request):
    """Every (family, mode, method) compressed in memory and saved, then all reloaded in ONE fresh
    process, from another working directory, with only torch + transformers importable."""
    root = tmp_path_factory.mktemp("compressed")
    cases = {}
    slow = runs_slow(request.config)
    for family, mode, method in CASES:
        if not slow and family not in FAST_FAMILIES:
            continue
        model = tiny_model(family, layers=4)
        cal = calibrate(model, blocks, batch_size=4, progress=False)
        plan = surgery.Plan(mode, method, (0, 2))  # layer 0 included on purpose
        maps = fit_maps(cal.stats, mode, plan.layers) if method == "nbl" else {}
        with torch.no_grad():
            base_logits = model(blocks).logits
        surgery.apply(model, plan, maps)
        out = save_compressed(model, tiny_tokenizer(), root / f"{family}-{mode}-{method}", family, {"layers": []})
        with torch.no_grad():
            cases[(family, mode, method)] = {
                "model": model,
                "out": out,
                "base_logits": base_logits,
                "logits": model(blocks).logits,
            }
    torch.save(blocks, root / "ids.pt")
    elsewhere = root / "elsewhere"
    elsewhere.mkdir()
    subprocess.run(
        [
            sys.executable,
            "-c",
            RELOAD,
            str(root / "ids.pt"),
            str(root / "res.pt"),
            *(str(c["out"]) for c in cases.values()),
        ],
        cwd=elsewhere,
        check=True,
        env={"PATH": "/usr/bin:/bin", "HF_HOME": str(root / "hf")},
    )
    reloaded = torch.load(root / "res.pt")
    for c in cases.values():
        c["reloaded"] = reloaded[str(c["out"])]
    return cases


@pytest.mark.parametrize("family,mode,method", PARAMS)
def test_compress_save_reload(family, mode, method, blocks, compressed):
    case = compressed[(family, mode, method)]
    model, out = case["model"], case["out"]
    assert not torch.allclose(case["logits"], case["base_logits"])
    with torch.no_grad():
        # greedy generation with the KV cache equals generation without it (layer 0 replaced)
        ids = blocks[:1, :6]
        assert _greedy(model, ids, True).tolist() == _greedy(model, ids, False).tolist()

    cfg = json.loads((out / "config.json").read_text())
    assert cfg["nbl"]["layers"] == [0, 2] and cfg["nbl"]["mode"] == mode and cfg["model_type"] == f"nbl_{family}"
    assert set(cfg["auto_map"]) == {"AutoConfig", "AutoModelForCausalLM"}
    assert (out / "modeling_nbl.py").is_file()
    assert not list(out.glob("*.bin")) and not list(out.glob("*.pkl"))
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert not any(k.startswith(("model.layers.0.self_attn.o_proj", "model.layers.2.self_attn.o_proj")) for k in keys)
    assert "model.layers.1.self_attn.o_proj.weight" in keys
    lin = "model.layers.0.self_attn.linear.weight" if mode == "attn" else "model.layers.0.linear.weight"
    assert (lin in keys) == (method == "nbl")
    if mode == "block":
        assert not any(k.startswith("model.layers.0.mlp") for k in keys)

    res = case["reloaded"]
    assert res["cls"].startswith("NBL")
    assert (res["logits"] - case["logits"]).abs().max().item() < 1e-4
    with torch.no_grad():
        assert res["gen"].tolist() == _greedy(model, blocks[:1, :6], True).tolist()


@pytest.mark.parametrize("mode", ["attn", "block"])
def test_kv_cache_bytes_fall_with_every_replaced_layer(mode, blocks):
    model = tiny_model("llama", layers=4)
    cal = calibrate(model, blocks, batch_size=4, progress=False)
    maps = fit_maps(cal.stats, mode, range(4))
    sizes = []
    for k in range(4):
        with surgery.replaced(model, surgery.Plan(mode, "nbl", tuple(range(k))), maps), torch.no_grad():
            out = model(blocks[:2], use_cache=True)
            sizes.append(_kv_bytes(out.past_key_values))
    per_layer = sizes[0] // 4
    assert sizes == [per_layer * (4 - k) for k in range(4)]


def test_replaced_restores_the_base_model(blocks):
    model = tiny_model("llama", layers=4)
    with torch.no_grad():
        before = model(blocks).logits
    cal = calibrate(model, blocks, batch_size=4, progress=False)
    maps = fit_maps(cal.stats, "attn", (1, 3))
    with surgery.replaced(model, surgery.Plan("attn", "nbl", (1, 3)), maps), torch.no_grad():
        assert not torch.allclose(model(blocks).logits, before)
    with torch.no_grad():
        assert torch.equal(model(blocks).logits, before)
    assert not hasattr(model.config, "nbl")
