"""The submit-time checks of a `local:NAME` model (POST /v1/jobs and POST /v1/estimates): the model is on this
server, has a readable config.json, and the request fits it (nbl/model/checks.py). A Hub model's config.json is
checked the same way when the API could fetch it (placement.py), and always by the worker, before any download
(worker/preflight.py)."""

from __future__ import annotations

from nbl import recipe as R
from nbl.model.checks import CONFIG, config_problems, read_config
from nbl.names import LOCAL_PREFIX
from nbl.request import JobCreate
from service.core.paths import local_model_dir
from service.core.settings import Settings


def submit_problems(spec: JobCreate, settings: Settings) -> list[dict]:
    """The submit-time checks of a `local:NAME` model, as validation errors in FastAPI's shape (empty
    when all is well). Hub models are checked by the worker, before any download."""
    model = spec.model.id
    if not model.startswith(LOCAL_PREFIX):
        return []
    errors: list[dict] = []

    def add(loc: tuple[str, ...], msg: str, kind: str) -> None:
        errors.append({"loc": ["body", *loc], "msg": msg, "type": kind})

    if spec.model.revision is not None:
        add(("model", "revision"), f"{model} is a local model: it has no revisions", "local_model_revision")
    directory = local_model_dir(settings, model)
    if not directory.is_dir():
        add(
            ("model", "id"),
            f"no model {model!r} on this server (`nbl import-gguf FILE --name NAME` adds one)",
            "local_model_missing",
        )
        return errors
    config = read_config(directory)
    if config is None:
        add(("model", "id"), f"{model}: its {CONFIG} is missing, not a JSON object, or nested too deep", "model_config")
        return errors
    return errors + config_errors(spec, config)


def config_errors(spec: JobCreate, config: dict) -> list[dict]:
    """What the request cannot do on a model with this config.json, as validation errors in FastAPI's shape."""
    comp = spec.compression
    return [
        {"loc": ["body", *loc], "msg": msg, "type": "model_limit"}
        for loc, msg in config_problems(config, comp.ks, spec.calibration.seq_len, comp.form or R.FORM, comp.mode)
    ]
