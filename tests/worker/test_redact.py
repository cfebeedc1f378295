"""worker/redact.py: known roots become the names users know them by; a root only matches whole."""

from __future__ import annotations

from worker.redact import Redactor


def test_roots_become_names_longest_first_and_only_whole(tmp_path):
    home = tmp_path / "home"
    r = Redactor(home / "models", {"$NBL_HOME": home, "$NBL_DATA_DIR": tmp_path / "data", "$TMPDIR": "/tmp"})
    assert r(f"{home}/models/smol-v2: no config.json in {home}/models/smol-v2") == \
        "local:smol-v2: no config.json in local:smol-v2"
    assert r(f"k=4: layers [1, 2] -> {home}/jobs/job_1/k4") == "k=4: layers [1, 2] -> $NBL_HOME/jobs/job_1/k4"
    assert r(f"'{tmp_path}/data/c4/c4_demo.json' is missing") == "'$NBL_DATA_DIR/c4/c4_demo.json' is missing"
    assert r(f"models dir {home}/models.") == "models dir $NBL_MODELS_DIR."
    assert r("/tmpfoo/x and /tmp/x and /tmp") == "/tmpfoo/x and $TMPDIR/x and $TMPDIR"
    assert r(None) is None and r("") == ""
