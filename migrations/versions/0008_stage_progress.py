"""progress: jobs.stage_progress, and job_events.stage_progress and eta_seconds

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01

`jobs.progress` is now the whole job's fraction, weighted by each stage's expected cost
(worker/progress.py); `stage_progress` is the current stage's. Events carry both figures and the ETA
of their moment, so a job's page can draw its timeline. Nullable: jobs and events written before this
revision have none. Frozen: plain SQLAlchemy types.
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: Union[str, Sequence[str], None] = "0007"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("stage_progress", sa.Float(), nullable=True))
    with op.batch_alter_table("job_events") as batch:
        batch.add_column(sa.Column("stage_progress", sa.Float(), nullable=True))
        batch.add_column(sa.Column("eta_seconds", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("job_events") as batch:
        batch.drop_column("eta_seconds")
        batch.drop_column("stage_progress")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("stage_progress")
