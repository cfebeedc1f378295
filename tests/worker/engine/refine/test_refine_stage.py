"""The refine stage through the engine's compress.run on a tiny Llama checkpoint and real text: the outputs carry
their refit and heal records, the saved maps are the refined ones, the refit's maps come from the statistics
cache on a second run with the same set, and healing asks for more text than there is with the field named."""

import json

import pytest
import torch
from safetensors import safe_open
from testkit.models import DATA_DIR, save_tiny_checkpoint

from nbl.recipe import Heal
from worker.engine import compress
from worker.engine.calibration.data import DataError, DatasetSpec
from worker.engine.config import CompressConfig
from worker.engine.refine.stage import heal_split


def _cfg(tmp_path, text_file, **kw):
    kw.setdefault("out", tmp_path / "out")
    return CompressConfig(
        model=str(tmp_path / "base"),
        dataset=DatasetSpec(str(text_file)),
        ks=[2],
        num_samples=8,
        seq_len=32,
        stats_dir=tmp_path / "stats",
        dtype="float32",
        **kw,
    )


def _saved_map(out, i, mode="attn"):
    name = f"model.layers.{i}.self_attn.linear.weight" if mode == "attn" else f"model.layers.{i}.linear.weight"
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        return f.get_tensor(name).double()


def test_heal_split():
    assert heal_split(1000, 32) == (29, 3) and heal_split(10, 32) == (1, 1) and heal_split(64, 32) == (1, 1)


def test_refit_and_heal_run_between_fit_and_save(tmp_path, text_file):
    save_tiny_checkpoint(tmp_path / "base", layers=4)
    stages = []
    plain = compress.run(_cfg(tmp_path, text_file), progress=False)
    refined = compress.run(
        _cfg(tmp_path, text_file, out=tmp_path / "out2", refit="sequential", heal=Heal(tokens=256, steps=3, lr=1e-3)),
        report=lambda s, f, m: stages.append(s),
        progress=False,
    )
    o, p = refined.outputs[0], plain.outputs[0]
    assert o["replaced_layers"] == p["replaced_layers"] and "refit" not in p and "heal" not in p
    assert o["refit"]["method"] == "sequential" and not o["refit"]["cached"]
    assert set(o["refit"]["nmse"]) == {str(i) for i in o["replaced_layers"]}
    assert o["heal"]["steps"] == 3 and o["heal"]["tokens"] == 3 * 3 * 32 and o["heal"]["held_tokens"] == 32
    assert "refine" in stages and stages.index("refine") < len(stages) - 1 - stages[::-1].index("compress")
    assert refined.timings["refine_s"] > 0 and "refine_s" not in plain.timings
    report = json.loads((tmp_path / "out2" / "nbl_scores.json").read_text())  # what the card is written from
    assert report["refine"]["heal"]["steps"] == 3 and report["recipe"]["refit"] == "sequential"
    assert report["recipe"]["heal"]["tokens"] == 256 and "refine" not in json.loads(
        (tmp_path / "out" / "nbl_scores.json").read_text()
    )
    deeper = max(o["replaced_layers"])  # below it a replacement moved the stream: its map is not the one-shot
    assert not torch.allclose(_saved_map(tmp_path / "out2", deeper), _saved_map(tmp_path / "out", deeper))


def test_a_second_refit_of_the_same_set_reads_the_cache(tmp_path, text_file):
    save_tiny_checkpoint(tmp_path / "base", layers=4)
    first = compress.run(_cfg(tmp_path, text_file, refit="sequential"), progress=False).outputs[0]
    again = compress.run(_cfg(tmp_path, text_file, out=tmp_path / "out2", refit="sequential"), progress=False).outputs[
        0
    ]
    assert not first["refit"]["cached"] and again["refit"]["cached"]
    assert again["refit"]["nmse"] == first["refit"]["nmse"]
    for i in first["replaced_layers"]:
        assert torch.equal(_saved_map(tmp_path / "out2", i), _saved_map(tmp_path / "out", i))
    assert list((tmp_path / "stats").glob("*.stats/refit-*.safetensors"))


def test_healing_past_the_data_names_the_field(tmp_path, text_file):
    save_tiny_checkpoint(tmp_path / "base", layers=4)
    with pytest.raises(DataError, match="compression.heal.tokens"):
        compress.run(_cfg(tmp_path, text_file, heal=Heal(tokens=10**7)), progress=False)


def test_healing_past_the_data_fails_before_calibrating(tmp_path, text_file):
    """Issue 35, finding 7: the healing text is tokenized with the calibration's, before any layer's sums, so too
    little of it fails then, not after calibrating and scoring."""
    save_tiny_checkpoint(tmp_path / "base", layers=4)
    stages = []
    with pytest.raises(DataError, match="compression.heal.tokens: .* must give 8 \\+ 31,250 blocks of 32 tokens"):
        compress.run(
            _cfg(tmp_path, text_file, heal=Heal(tokens=10**6)),
            report=lambda s, f, m: stages.append((s, m)),
            progress=False,
        )
    assert stages[-1] == ("calibrate", "tokenizing calibration data and healing text"), stages
    assert not list((tmp_path / "stats").glob("*.stats"))  # no layer was calibrated


def test_a_selection_dataset_other_than_the_calibrations_guards_the_heal(tmp_path, text_file):
    """The heal's guard is the selection data's blocks when they are other text; the calibration's own dataset as
    selection data is the healing text itself, so it gives no guard."""
    save_tiny_checkpoint(tmp_path / "base", layers=4)
    other = tmp_path / "other.jsonl"
    docs = json.loads((DATA_DIR / "c4" / "c4_demo.json").read_text())[40:80]
    other.write_text("".join(json.dumps({"text": d["text"]}) + "\n" for d in docs))
    heal = Heal(tokens=256, steps=3, lr=1e-3)
    guarded = compress.run(
        _cfg(tmp_path, text_file, heal=heal, selection=DatasetSpec(str(other)), selection_samples=4), progress=False
    ).outputs[0]["heal"]
    assert guarded["guard_tokens"] == 4 * 32 and guarded["guard_perplexity_before"] > 0
    assert guarded["kept"] == (
        guarded["perplexity_after"] <= guarded["perplexity_before"]
        and guarded["guard_perplexity_after"] <= guarded["guard_perplexity_before"]
    )
    same = compress.run(
        _cfg(
            tmp_path,
            text_file,
            out=tmp_path / "out2",
            heal=heal,
            selection=DatasetSpec(str(text_file)),
            selection_samples=4,
        ),
        progress=False,
    ).outputs[0]["heal"]
    assert "guard_tokens" not in same and "guard_perplexity_before" not in same


def test_a_linear_output_is_refitted_bias_free_and_written_in_its_form(tmp_path, text_file):
    save_tiny_checkpoint(tmp_path / "base", layers=4, intermediate_size=256)  # DeciLM: the MLP width a multiple of 256
    plain = compress.run(_cfg(tmp_path, text_file, form="linear"), progress=False).outputs[0]
    refit = compress.run(
        _cfg(tmp_path, text_file, out=tmp_path / "out2", form="linear", refit="sequential"), progress=False
    ).outputs[0]
    assert refit["form"] == "linear" and refit["refit"]["method"] == "sequential"
    assert refit["replaced_layers"] == plain["replaced_layers"]
    config = json.loads((tmp_path / "out2" / "config.json").read_text())
    assert "block_configs" in config  # DeciLM, as without the refit


def test_nbl_compress_refits_heals_and_says_so(tiny_dir, text_file, tmp_path, capsys):
    from cli import main as cli

    args = [
        "compress",
        "--model",
        tiny_dir,
        "--dataset",
        text_file,
        "--num-samples",
        8,
        "--seq-len",
        32,
        "--k",
        2,
        "--out",
        tmp_path / "out",
        "--no-load-check",
        "--refit",
        "sequential",
        "--heal-tokens",
        128,
        "--heal-steps",
        2,
    ]
    assert cli.main([str(a) for a in args]) == 0
    out = capsys.readouterr().out
    assert "refit (sequential):" in out and "heal: 128 tokens, 2 steps" in out  # 3 training blocks: 2 a step
    card = (tmp_path / "out" / "README.md").read_text()
    assert "## Refinement" in card and "--refit sequential" in card and "--heal-tokens 128" in card
    assert cli.main([str(a) for a in args[:-4]] + ["--json"]) == 0  # the refit's maps now from the cache
    res = json.loads(capsys.readouterr().out)["result"]["outputs"][0]
    assert res["refit"] == {"seconds": res["refit"]["seconds"], "cached": True} and res["heal"] is None
