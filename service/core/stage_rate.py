"""What a worker class measured on one stage of a job that succeeded (migration 0011): the stage's planned
work in token-layers (nbl/sizing/stage_plan.py), the kind of work it did and the seconds it took, for the
model's shape key. The
API's estimate turns a class's latest rows into each stage's time (nbl/sizing/rates.py). Its own file
(models.py is full); migrations/env.py imports it, so its table is in Base.metadata there too."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Float, ForeignKey, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from service.core.models import Base, utcnow


class StageRate(Base):
    __tablename__ = "stage_rates"
    __table_args__ = (Index("ix_stage_rates_worker_class_shape_stage", "worker_class", "shape", "stage"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    worker_class: Mapped[str] = mapped_column(String(128))  # the job's queue: <NBL_QUEUE>-<class>
    shape: Mapped[str] = mapped_column(String(128))  # nbl/sizing/rates.shape_key
    stage: Mapped[str] = mapped_column(String(32))
    # the kind of work the stage did (nbl/sizing/kinds.py: `cached` calibration, `gguf:Q4_K_M` export; '' for
    # a stage of one kind): only rows of the kind a job will do price it (migration 0013)
    kind: Mapped[str] = mapped_column(String(64), default="", server_default="")
    weight: Mapped[float] = mapped_column(Float)  # the stage's planned token-layers (nbl/sizing/stage_plan.py);
    # `fetch` (a load's first read of the weights: worker/fetch.py): the checkpoint's bytes
    seconds: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
