"""Calibration data: spec resolution, local formats, the reference blocking, and its errors."""

import json

import pandas as pd
import pytest
from testkit.models import DATA_DIR, tiny_tokenizer

from worker.engine.calibration.data import DataError, DatasetSpec, load_texts, make_blocks, resolve


def test_blocks_follow_the_reference_recipe():
    tok = tiny_tokenizer()
    texts = ["abc", "de", "fghij"]
    blocks = make_blocks(texts, tok, num_samples=2, seq_len=4)
    # no BOS, EOS after each text, concatenated, cut into blocks, remainder dropped
    stream = []
    for t in texts:
        stream += tok(t, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    assert blocks.tolist() == [stream[:4], stream[4:8]]
    assert tok.bos_token_id not in blocks.flatten().tolist()


def test_blocks_open_with_the_tokenizers_prefix():
    """Gemma's tokenizer puts <bos> before a text: every block opens with it, then seq_len - 1 stream tokens."""
    plain, bos = tiny_tokenizer(), tiny_tokenizer(bos=True)
    texts = ["abc", "de", "fghij", "klmnopq"]
    stream = []
    for t in texts:
        stream += plain(t, add_special_tokens=False)["input_ids"] + [plain.eos_token_id]
    blocks = make_blocks(texts, bos, num_samples=3, seq_len=5)
    assert blocks.tolist() == [[0, *stream[:4]], [0, *stream[4:8]], [0, *stream[8:12]]]
    # the first blocks do not depend on how many are asked for (the heal's and selection's blocks follow them)
    assert make_blocks(texts, bos, 2, 5).tolist() == blocks[:2].tolist()
    # without a prefix: the reference's blocks, as before
    assert make_blocks(texts, plain, 3, 5).tolist() == [stream[:5], stream[5:10], stream[10:15]]
    assert make_blocks(texts, plain, 3, 7).shape == (3, 7)  # 21 stream tokens (17 characters, 4 EOS)
    with pytest.raises(DataError, match="gives 2 blocks of 9 tokens"):
        make_blocks(texts, bos, 3, 9)  # 21 stream tokens: 2 blocks of 8 after the prefix


def test_shuffle_is_seeded_and_too_little_data_says_how_many_blocks():
    tok = tiny_tokenizer()
    texts = [f"document number {i} " * 3 for i in range(50)]
    a = make_blocks(texts, tok, 5, 16, shuffle=True, seed=1)
    assert a.tolist() == make_blocks(texts, tok, 5, 16, shuffle=True, seed=1).tolist()
    assert a.tolist() != make_blocks(texts, tok, 5, 16, shuffle=True, seed=2).tolist()
    assert a.tolist() != make_blocks(texts, tok, 5, 16).tolist()
    with pytest.raises(DataError, match=r"gives 1 blocks of 16 tokens .* num_samples=3"):
        make_blocks(["x" * 20], tok, 3, 16)


@pytest.mark.parametrize("fmt", ["json", "jsonl", "txt", "parquet"])
def test_local_file_formats(tmp_path, fmt):
    docs = ["first document", "second one", "third text"]
    path = tmp_path / f"data.{fmt}"
    if fmt == "json":
        path.write_text(json.dumps([{"text": d} for d in docs]))
    elif fmt == "jsonl":
        path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    elif fmt == "txt":
        path.write_text("\n".join(docs) + "\n\n")
    else:
        pd.DataFrame({"text": docs}).to_parquet(path)
    assert list(load_texts(DatasetSpec(str(path)))) == docs


def test_text_field_and_missing_file(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"body": "hello"}) + "\n")
    assert list(load_texts(DatasetSpec(str(path), text_field="body"))) == ["hello"]
    with pytest.raises(DataError, match="no text field 'text'.*body"):
        list(load_texts(DatasetSpec(str(path))))
    with pytest.raises(DataError, match="not found"):
        resolve(DatasetSpec(str(tmp_path / "nope.jsonl")))


def test_names_resolve_to_local_copies():
    texts = list(load_texts(DatasetSpec("c4"), DATA_DIR))
    assert len(texts) == 300  # c4_demo.json, the reference code's calibration set
    assert resolve(DatasetSpec("wikitext2", split="test"), DATA_DIR)[0].endswith("wiki.test.raw")
    with pytest.raises(DataError, match="local copy .* splits"):
        resolve(DatasetSpec("wikitext2", split="train"), DATA_DIR)


def test_names_resolve_to_the_hub_without_a_data_dir(monkeypatch):
    monkeypatch.setenv("NBL_DATA_DIR", str(DATA_DIR))  # the engine reads no variable: only its argument counts
    desc, kw = resolve(DatasetSpec("wikitext2"))
    assert kw == {"path": "Salesforce/wikitext", "name": "wikitext-2-raw-v1", "split": "train"}
    desc, kw = resolve(DatasetSpec("c4"))
    assert desc == "allenai/c4" and kw["data_files"]["train"].startswith("hf://datasets/allenai/c4/en/")


def test_a_hub_dataset_id_that_is_also_a_local_path_is_refused(tmp_path, monkeypatch):
    """datasets.load_dataset("owner/name") would read a directory of that name in the working directory."""
    monkeypatch.chdir(tmp_path)
    assert resolve(DatasetSpec("owner/name"))[1]["path"] == "owner/name"  # nothing local: the Hub id
    (tmp_path / "owner" / "name").mkdir(parents=True)
    (tmp_path / "owner" / "name" / "data.jsonl").write_text(json.dumps({"text": "a local secret"}) + "\n")
    with pytest.raises(DataError, match="working directory.*./owner/name"):
        resolve(DatasetSpec("owner/name"))
    with pytest.raises(DataError, match="working directory"):
        list(load_texts(DatasetSpec("owner/name")))
    (tmp_path / "plain").mkdir()
    with pytest.raises(DataError, match="working directory"):
        resolve(DatasetSpec("plain"))
    assert resolve(DatasetSpec("./owner/name"))[1]["path"] == "./owner/name"  # a path, spelt as one, still works
