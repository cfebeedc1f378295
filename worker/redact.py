"""No server path leaves the worker: a job's events and error message are scrubbed where they are written.

Messages come from everywhere (the engine, datasets, transformers, huggingface_hub) and some quote the
paths they read: the models directory, NBL_DATA_DIR, the job's scratch directory, the worker's working
directory. Each known root is replaced by the name a user knows it by:

    NBL_MODELS_DIR/NAME...   local:NAME...          NBL_HOME       $NBL_HOME
    NBL_MODELS_DIR           $NBL_MODELS_DIR        NBL_DATA_DIR   $NBL_DATA_DIR
    NBL_PUBLISH_DIR          $NBL_PUBLISH_DIR       the cwd        $WORKDIR
    NBL_STATS_DIR            $NBL_STATS_DIR         the temp dir   $TMPDIR
    the Hub cache            $HF_HUB_CACHE          the user's home ~
    the worker's code        $NBL_SOURCE            sys.prefix     $PYTHON_PREFIX (a venv; its base $PYTHON_BASE)
    the GGUF venv            $GGUF_PREFIX

Longer roots go first (the models directory sits under NBL_HOME), each as given and as resolved
(symlinks), and a root only matches whole (`/tmp` never eats `/tmpfoo`).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent  # the checkout (or site-packages) this worker runs from
_END = r"(?![\w-]|\.[\w.-])"  # a root ends where a path component ends (a full stop may follow)


def _variants(path) -> set[str]:
    p = str(Path(path).expanduser())
    out = {p.rstrip("/"), os.path.realpath(p).rstrip("/")}
    return {v for v in out if v.count("/") >= 1 and v != ""}  # never "/" itself


class Redactor:
    def __init__(self, models_dir=None, roots: dict[str, object] | None = None):
        rules: list[tuple[int, re.Pattern, str]] = []
        for root in _variants(models_dir) if models_dir else ():
            rules.append(
                (len(root) + 1, re.compile(re.escape(root) + r"/([A-Za-z0-9][A-Za-z0-9._-]*)" + _END), r"local:\1")
            )
            rules.append((len(root), re.compile(re.escape(root) + _END), "$NBL_MODELS_DIR"))
        for name, path in (roots or {}).items():
            for root in _variants(path) if path else ():
                rules.append((len(root), re.compile(re.escape(root) + _END), name))
        self.rules = [(rx, sub) for _, rx, sub in sorted(rules, key=lambda r: -r[0])]

    @classmethod
    def for_settings(cls, settings) -> "Redactor":
        from huggingface_hub import constants

        return cls(
            settings.models_dir,
            {
                "$NBL_PUBLISH_DIR": settings.publish_dir,
                "$NBL_STATS_DIR": settings.stats_dir,
                "$NBL_HOME": settings.home,
                "$NBL_DATA_DIR": settings.data_dir,
                "$HF_HUB_CACHE": constants.HF_HUB_CACHE,
                "$WORKDIR": os.getcwd(),
                "$TMPDIR": tempfile.gettempdir(),
                "~": Path.home(),
                # tracebacks a subprocess printed (the load check, the GGUF converter) name their frames' files
                "$NBL_SOURCE": SOURCE,
                "$PYTHON_PREFIX": sys.prefix,
                "$PYTHON_BASE": sys.base_prefix,
                "$GGUF_PREFIX": Path(settings.gguf_python).parent.parent if settings.gguf_python else None,
            },
        )

    def __call__(self, text: str | None) -> str | None:
        if not text:
            return text
        for rx, sub in self.rules:
            text = rx.sub(sub, text)
        return text
