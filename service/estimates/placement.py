"""The API's side of an estimate: read the job's config.json, place the job on a worker class.

A `local:NAME` config is read from disk; a Hub config is fetched alone (configs.py). When the Hub
cannot be reached at submit, POST /v1/jobs still accepts the job: it goes to the first class's queue
without an estimate, and the worker estimates it against its own devices before downloading anything
(worker/preflight.py); for a minute after that, jobs do not try the Hub again (an API without Hub
access pays the failed GET once a minute, not on every submit). POST /v1/estimates always tries, and
has nothing to answer without the config: a 503. A config that was had but is not one (not JSON, nested
too deep), whose numbers are out of bounds (shapes.BOUNDS), or that the request cannot work on (a family or
form this engine cannot write, k or seq_len past the model's: nbl/model/checks.py, as a `local:NAME` model's at
submit) is a 422 from both.
"""

from __future__ import annotations

import time

from nbl.model.shape import shape_summary
from nbl.names import LOCAL_PREFIX
from nbl.recipe import from_request
from nbl.request import JobCreate
from nbl.sizing.classes import Placement
from nbl.sizing.shapes import ShapeError
from service.core.errors import InvalidRequest, NotReady
from service.core.settings import Settings

from .configs import ConfigUnavailable, model_config
from .jobs import place_job, placement_json
from .local_model import config_errors

HUB_TIMEOUT_S = 5.0  # a client waits on this GET; a slower Hub leaves the job to the worker's check
HUB_RETRY_AFTER_S = 60.0  # after the Hub could not be reached, jobs skip the fetch this long (an offline API)
_hub_down_until = 0.0


def placement_for(
    body: JobCreate, settings: Settings, *, required: bool, config: dict | None = None
) -> tuple[Placement | None, dict | None]:
    """(placement, its stored form); (None, None) when the config cannot be had and not `required`. `config`:
    given inline (POST /v1/estimates' `config`), checked as a Hub model's and never fetched."""
    global _hub_down_until
    hub = config is not None or not body.model.id.startswith(LOCAL_PREFIX)
    if config is None and hub and not required and time.monotonic() < _hub_down_until:
        return None, None
    try:
        if config is None:
            config = model_config(body.model.id, settings, body.model.revision, timeout_s=HUB_TIMEOUT_S)
    except ConfigUnavailable as e:
        if e.unreachable and hub:
            _hub_down_until = time.monotonic() + HUB_RETRY_AFTER_S
        if not required and not e.invalid:  # the worker reads it again (its own token, later): its check
            return None, None
        if e.unreachable:
            raise NotReady(str(e), headers={"Retry-After": "30"}) from None
        raise InvalidRequest(
            str(e), errors=[{"loc": ["body", "model", "id"], "msg": str(e), "type": "model_config"}]
        ) from None
    errors = config_errors(body, config) if hub else []  # a local model's were checked before (local_model.py)
    if errors:
        raise InvalidRequest(errors[0]["msg"], errors=errors)
    try:
        placement = place_job(config, from_request(body), settings)
    except ShapeError as e:
        msg = f"{body.model.id}: {e}"
        loc = ["body", "config"] if getattr(body, "config", None) is not None else ["body", "model", "id"]
        raise InvalidRequest(msg, errors=[{"loc": loc, "msg": msg, "type": "model_config"}]) from None
    return placement, {**placement_json(placement, settings), "shape": shape_summary(config)}  # GET /v1/models


def refuse_unplaced(placement: Placement | None, stored: dict | None) -> None:
    """A job no worker class can hold is a 422 at submit, with the numbers."""
    if placement is not None and placement.cls is None:
        msg = f"no worker class can run this job: {placement.reason}"
        raise InvalidRequest(msg, errors=[{"loc": ["body"], "msg": msg, "type": "does_not_fit", "estimate": stored}])
