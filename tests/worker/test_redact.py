"""worker/redact.py: known roots become the names users know them by; a root only matches whole."""

from __future__ import annotations

from worker.redact import Redactor


def test_roots_become_names_longest_first_and_only_whole(tmp_path):
    home = tmp_path / "home"
    r = Redactor(home / "models", {"$NBL_HOME": home, "$NBL_DATA_DIR": tmp_path / "data", "$TMPDIR": "/tmp"})
    assert (
        r(f"{home}/models/smol-v2: no config.json in {home}/models/smol-v2")
        == "local:smol-v2: no config.json in local:smol-v2"
    )
    assert r(f"k=4: layers [1, 2] -> {home}/jobs/job_1/k4") == "k=4: layers [1, 2] -> $NBL_HOME/jobs/job_1/k4"
    assert r(f"'{tmp_path}/data/c4/c4_demo.json' is missing") == "'$NBL_DATA_DIR/c4/c4_demo.json' is missing"
    assert r(f"models dir {home}/models.") == "models dir $NBL_MODELS_DIR."
    assert r("/tmpfoo/x and /tmp/x and /tmp") == "/tmpfoo/x and $TMPDIR/x and $TMPDIR"
    assert r(None) is None and r("") == ""


def test_the_installed_code_and_pythons_are_named_not_shown(tmp_path, monkeypatch):
    """The load check's and the GGUF converter's failures quote their traceback's last lines: frames in the
    venv's site-packages and in the checkout (`/srv/nbl/.venv/lib/python3.11/site-packages/transformers/...`)
    reached a job's error, where the worker ran from another directory."""
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    import worker

    monkeypatch.chdir(tmp_path)  # the worker's working directory is not the checkout
    gguf_venv = tmp_path / "gguf-venv"
    settings = SimpleNamespace(
        models_dir=tmp_path / "m",
        publish_dir=tmp_path / "p",
        stats_dir=tmp_path / "s",
        home=tmp_path / "h",
        data_dir=None,
        gguf_python=gguf_venv / "bin" / "python",
    )
    source = Path(worker.__file__).resolve().parent.parent
    said = Redactor.for_settings(settings)(
        f'load check: exit 1: File "{sys.prefix}/lib/python3.11/site-packages/transformers/x.py", line 9 | '
        f'File "{source}/worker/publish/loadcheck.py", line 3 | '
        f'File "{gguf_venv}/lib/python3.11/site-packages/gguf/y.py" | ValueError: bad'
    )
    for root in {sys.prefix, sys.base_prefix, str(source), str(gguf_venv)}:
        assert root not in said, said
    assert said.endswith("ValueError: bad") and "site-packages/transformers/x.py" in said
