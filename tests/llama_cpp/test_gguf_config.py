"""What a crafted input model can hand llama.cpp's converter (issue 35): config.json keys the converter reads
before transformers' own are refused before it runs (worker/publish/gguf_config.py), and a tokenizer that asks
for its own code never gets it run, nor finds the worker's secrets (integrations/gguf/export_gguf.py,
worker/subproc.child_env). The refusals with a fake converter (it must never start); the checks against the
pinned converter's own source and its real run where the GGUF venv exists."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from testkit.fake_converter import fake_converter, llama_dir, runs

from cli.main import main
from worker.publish.gguf_config import CONVERTER_KEYS, EXPERT_COUNT
from worker.publish.gguf_export import GgufExportError, export_gguf

LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "num_hidden_layers": 4,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 128,
    "max_position_embeddings": 256,
}


def export(capsys, model: Path, out: Path) -> tuple[int, str]:
    try:
        code = main(["export", str(model), "--format", "gguf", "--type", "q8_0", "--out", str(out)])
    except SystemExit as e:
        code = e.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, needle",
    [
        (
            {"n_layers": 10**7},
            "config.json's 'n_layers' (10000000) is what llama.cpp's converter reads as "
            "num_hidden_layers (4 for transformers): remove 'n_layers'",
        ),
        ({"n_heads": 1}, "'n_heads' (1) is what llama.cpp's converter reads as num_attention_heads (4 for"),
        ({"n_kv_heads": 4}, "'n_kv_heads' (4) is what llama.cpp's converter reads as num_key_value_heads (2 for"),
        ({"dense_intermediate_size": 10**9}, "reads as intermediate_size (128 for transformers)"),
        ({"vocab_size_per_layer_input": 10**9}, "reads as vocab_size (128 for transformers)"),
        ({"rope_pct": 0.5}, "reads as partial_rotary_factor (not set: transformers' default)"),
        (
            {"n_positions": 10**7},
            "'n_positions' (10000000) is what llama.cpp's converter reads as max_position_embeddings (256 for",
        ),
        (
            {
                "architectures": ["Qwen3MoeForCausalLM"],
                "model_type": "qwen3_moe",
                "norm_topk_prob": True,
                "num_experts": 4,
                "num_local_experts": 10**7,
            },
            "'num_local_experts' (10000000) is what llama.cpp's converter reads as num_experts (4 for transformers)",
        ),
        (
            {"text_config": {"num_hidden_layers": 10**7}},
            "config.json has 'text_config', whose keys llama.cpp's converter",
        ),
    ],
)
def test_keys_the_converter_reads_first_are_refused_before_it_runs(capsys, tmp_path, monkeypatch, extra, needle):
    exe, log = fake_converter(tmp_path / "venv")
    monkeypatch.setenv("NBL_GGUF_PYTHON", str(exe))
    model = llama_dir(tmp_path / "model")
    (model / "config.json").write_text(json.dumps({**LLAMA, **extra}))
    code, err = export(capsys, model, tmp_path / "x.gguf")
    assert code == 2 and needle in err and err.count("\n") == 1, err
    assert runs(log) == [] and not (tmp_path / "x.gguf").exists()


def test_aliases_that_agree_with_transformers_export(capsys, tmp_path, monkeypatch):
    exe, log = fake_converter(tmp_path / "venv")
    monkeypatch.setenv("NBL_GGUF_PYTHON", str(exe))
    model = llama_dir(tmp_path / "model")
    (model / "config.json").write_text(json.dumps({**LLAMA, "n_layers": 4, "n_heads": 4, "max_length": 20}))
    code, err = export(capsys, model, tmp_path / "x.gguf")
    assert code == 0 and len(runs(log)) == 1, err


ENV_DUMP = """#!/bin/sh
env > {dump}
printf 'GGUF fake' > "$3"
"""


def test_the_converter_gets_none_of_the_workers_secrets(tmp_path, monkeypatch):
    exe = tmp_path / "python"
    exe.write_text(ENV_DUMP.format(dump=tmp_path / "env.txt"))
    exe.chmod(0o755)
    monkeypatch.setenv("HF_TOKEN", "hf_x9q7")
    monkeypatch.setenv("DATABASE_URL", "postgresql://nbl:x9q7@db/nbl")
    monkeypatch.setenv("NBL_ADMIN_KEY", "nbl_x9q7")
    model = llama_dir(tmp_path / "model")
    export_gguf(model, model / "model-f16.gguf", "f16", python=exe)
    env = dict(line.split("=", 1) for line in (tmp_path / "env.txt").read_text().splitlines() if "=" in line)
    assert "x9q7" not in (tmp_path / "env.txt").read_text()
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"


# the converter's classes of the other architectures exported (nbl/families.py `gguf`), by file
CLASSES = {"phi.py": ("Phi3MiniModel",), "qwen.py": ("Qwen2MoeModel", "Qwen3MoeModel"), "olmo.py": ("OlmoeModel",)}


def converter_lists(llama_cpp: Path) -> list[tuple[str, ...]]:
    """Every find_hparam([...]) key list of the converter's base and Llama classes and of the other exported
    architectures' classes, comments stripped."""
    found = []
    sources = [(llama_cpp / "conversion" / name).read_text() for name in ("base.py", "llama.py")]
    for name, classes in CLASSES.items():
        text = (llama_cpp / "conversion" / name).read_text()
        for cls in classes:
            body = re.search(rf"\nclass {cls}\(.*?(?=\n@ModelBase|\nclass |\Z)", text, flags=re.S)
            assert body, f"no class {cls} in conversion/{name}"
            sources.append(body.group(0))
    for source in sources:
        source = re.sub(r"#[^\n]*", "", source)
        for body in re.findall(r"find_hparam\(\s*\[(.*?)\]", source, flags=re.S):
            found.append(tuple(re.findall(r"[\"']([^\"']+)[\"']", body)))
    return found


def test_the_key_table_is_the_pinned_converters(gguf_python):
    """Each of the converter's lists that names a transformers key we check is in the table, in its order."""
    lists = converter_lists(gguf_python.parent.parent / "llama.cpp")
    assert lists, "no find_hparam in the converter's source: the check below would pass on nothing"
    for keys in lists:
        for own, orders in CONVERTER_KEYS.items():
            if own in keys:
                assert keys in orders, f"the converter reads {own} as {keys}; the table has {orders}"
    listed = {order for orders in CONVERTER_KEYS.values() for order in orders} | set(EXPERT_COUNT)
    assert listed <= set(lists)


@pytest.mark.slow
def test_a_tokenizer_asking_for_its_own_code_never_runs_it(gguf_python, tmp_path):
    """A checkpoint whose tokenizer_config.json names HybridDNATokenizer and maps it to a .py beside it: the
    converter asks transformers for trust_remote_code=True there. The file ran, with the worker's environment;
    now transformers refuses the checkpoint and the export fails naming the custom code."""
    from testkit.models import save_tiny_checkpoint

    model = save_tiny_checkpoint(tmp_path / "model")
    config = json.loads((model / "tokenizer_config.json").read_text())
    config.update(tokenizer_class="HybridDNATokenizer", auto_map={"AutoTokenizer": ["evil.EvilTokenizer", None]})
    (model / "tokenizer_config.json").write_text(json.dumps(config))
    ran = tmp_path / "ran"
    (model / "evil.py").write_text(
        f"open({str(ran)!r}, 'w').write('ran')\nfrom transformers import PreTrainedTokenizerFast as EvilTokenizer\n"
    )
    with pytest.raises(GgufExportError, match="contains custom code"):
        export_gguf(model, tmp_path / "x.gguf", "f16", python=gguf_python)
    assert not ran.exists()
