"""Issue 10, finding 2, the worker's side: a calibration dataset named like one of `datasets`' packaged
builders (csv, json, text, parquet, ...) reads nothing of the worker's working directory: the name is
refused before `datasets` runs, and `datasets` runs in an empty directory of its own, so a name that
slipped through reads nothing either. A canary file sits in the working directory each time; its
content must appear nowhere."""

from __future__ import annotations

import json
import os

import pytest
from testkit.models import save_tiny_checkpoint

from cli import main as cli
from nbl.data import dataset_names
from worker.engine.calibration.data import DataError, DatasetSpec, load_texts

SECRET = "SECRET-CANARY-7f3a"


@pytest.fixture
def canary_cwd(tmp_path, monkeypatch):
    """A working directory holding a file of every kind the builders read, all carrying the secret."""
    cwd = tmp_path / "worker-cwd"
    cwd.mkdir()
    (cwd / "canary.csv").write_text(f"{SECRET}\n{SECRET} row\n")
    (cwd / "canary.txt").write_text(f"{SECRET} line\n")
    (cwd / "canary.jsonl").write_text(json.dumps({"text": SECRET}) + "\n")
    monkeypatch.chdir(cwd)
    return cwd


def read_all(spec: DatasetSpec) -> list[str]:
    return list(load_texts(spec))


@pytest.mark.parametrize("name", ["csv", "text", "json", "parquet", "CSV", "imagefolder"])
def test_builder_names_are_refused_before_datasets_runs(canary_cwd, name):
    with pytest.raises(DataError, match="built-in loader of the `datasets` library") as e:
        read_all(DatasetSpec(name))
    assert SECRET not in str(e.value)


@pytest.mark.parametrize("name", ["csv", "text", "json"])
def test_a_builder_name_that_slips_through_reads_nothing_of_the_working_directory(canary_cwd, monkeypatch, name):
    monkeypatch.setattr(dataset_names, "PACKAGED_BUILDERS", frozenset())  # as if the list missed it
    with pytest.raises(DataError) as e:
        read_all(DatasetSpec(name))
    assert SECRET not in str(e.value) and "doesn't contain any data files" in str(e.value)
    assert os.getcwd() == str(canary_cwd)  # given back


def test_relative_local_files_still_load_from_the_working_directory(canary_cwd):
    assert read_all(DatasetSpec("canary.jsonl")) == [SECRET]  # the CLI user's own file, named explicitly


def test_nbl_compress_refuses_a_bare_builder_name(canary_cwd, tmp_path, capsys):
    model = save_tiny_checkpoint(tmp_path / "tiny")
    code = cli.main(
        [
            "compress",
            "--model",
            str(model),
            "--dataset",
            "csv",
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
    assert code == 2 and "built-in loader" in err and SECRET not in err, err


class RecordingSink:
    """The pipeline's sink (the worker task writes these to the job's events), recorded as text."""

    def __init__(self):
        self.lines: list[str] = []

    def __getattr__(self, name):
        return lambda *args: self.lines.append(f"{name} {args!r}")


def test_a_job_reaching_the_data_loader_with_csv_reads_nothing_of_the_working_directory(canary_cwd, tmp_path):
    """The worker's pipeline given a spec naming `csv` (as a job stored before the API refused it would):
    it fails as a user error, and the secret is in no error or event."""
    from nbl.recipe import Calibration, Compression, Recipe
    from worker.pipeline import run
    from worker.pipeline_io import Paths
    from worker.publish.local import LocalDir

    model = save_tiny_checkpoint(tmp_path / "tiny")
    recipe = Recipe(
        model=str(model),
        calibration=Calibration(dataset="csv", num_samples=4, seq_len=32),
        compression=Compression(ks=(1,)),
    )
    sink = RecordingSink()
    with pytest.raises(DataError, match="built-in loader") as e:
        run(
            recipe,
            sink,
            Paths(work_dir=tmp_path / "work", publish_dir=tmp_path / "pub"),
            LocalDir(tmp_path / "pub", "alpha", "out", "job_x"),
        )
    assert SECRET not in str(e.value) and SECRET not in "\n".join(sink.lines)
    assert any("load" in line for line in sink.lines)  # it did get as far as the data loader
