"""The team's disk quota at submit (the rule: nbl/outputs/quota.py): a job whose estimate plans more local
output than the team has left is a 422 naming the quota, the planned bytes and the team's usage.

Called by create_job under the team's lock, so concurrent submits of one team count one after the other;
the team's other active jobs count with what they plan. A job without an estimate (the Hub was out of
reach at submit) or publishing to the Hub is not checked here; the worker checks every local publish.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from nbl.lru import tree_size
from nbl.outputs.quota import Check, usage
from nbl.request import JobCreate
from service.core.errors import InvalidRequest
from service.core.models import ACTIVE, Job
from service.core.paths import publish_dir
from service.core.settings import Settings
from service.keys.auth import Principal


def planned_bytes(spec: dict, estimate: dict | None) -> int:
    """Bytes of local outputs a stored request plans: its estimate's disk.outputs when it publishes to a
    local folder (no publish section, or local_dir); 0 for the Hub, or without an estimate."""
    if not estimate or "repo_id" in (spec.get("publish") or {}):
        return 0
    return int((estimate.get("disk") or {}).get("outputs") or 0)


def check_disk_quota(
    session: Session, principal: Principal, spec: JobCreate, estimate: dict | None, settings: Settings
) -> None:
    quota, stored = settings.team_disk_quota_bytes, spec.model_dump(mode="json")
    adding = planned_bytes(stored, estimate)
    if quota is None or adding == 0:
        return
    others = session.execute(
        select(Job.spec, Job.estimate).where(Job.team_id == principal.team_id, Job.status.in_(ACTIVE))
    ).all()
    local = stored.get("publish") or {}
    replacing = 0  # an output this job may replace (overwrite) frees its bytes
    if local.get("overwrite") and local.get("local_dir"):
        replacing = tree_size(publish_dir(settings, principal.team_name, local["local_dir"]))
    check = Check(
        principal.team_name,
        quota,
        usage(settings.publish_dir, principal.team_name),
        adding,
        replacing=replacing,
        reserved=sum(planned_bytes(s, e) for s, e in others),
    )
    if check.over:
        session.rollback()
        msg = check.message("this job's estimated")
        raise InvalidRequest(
            msg, errors=[{"loc": ["body", "publish"], "msg": msg, "type": "disk_quota_exceeded", **check.figures()}]
        )
