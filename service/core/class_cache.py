"""What a worker class holds for later jobs (migration 0012): a model's files on its disk (kind `model`) and
a base model's evaluation in its cache (kind `base_evaluation`), under the request-level keys of
nbl/sizing/reuse.py. The worker notes each (worker/host/caches.py); the API's estimate reads them to price a
warm load and an evaluation of the outputs alone (service/estimates/reuse.py). A note outlives its job: the
cache it names does too. Its own file, like stage_rate.py; migrations/env.py imports it."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from service.core.models import Base, utcnow


class ClassCache(Base):
    __tablename__ = "class_caches"
    __table_args__ = (Index("ix_class_caches_worker_class_kind_key", "worker_class", "kind", "key", unique=True),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    worker_class: Mapped[str] = mapped_column(String(128))  # the job's queue: <NBL_QUEUE>-<class>
    kind: Mapped[str] = mapped_column(String(32))  # nbl/sizing/reuse.py: model | base_evaluation
    key: Mapped[str] = mapped_column(String(255))
    job_id: Mapped[str | None] = mapped_column(String(36))  # the job that filled it (no key: it outlives the job)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
