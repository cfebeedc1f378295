"""stage_rates: what each worker class measured, per stage and model shape (issue 28)

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03

A worker writes one row per stage of a job that succeeded: the stage's planned work in token-layers
(nbl/sizing/stage_plan.py) and the seconds it took, under its worker class (the job's queue) and the
model's shape key. The API's estimate turns the latest rows of a class and shape into each stage's time
(nbl/sizing/rates.py). Rows of a deleted job go with it. Frozen: plain SQLAlchemy types.
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: Union[str, Sequence[str], None] = "0010"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "stage_rates",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column(
            "job_id",
            sa.String(36),
            sa.ForeignKey("jobs.id", ondelete="CASCADE", name="fk_stage_rates_job_id_jobs"),
            nullable=False,
        ),
        sa.Column("worker_class", sa.String(128), nullable=False),
        sa.Column("shape", sa.String(128), nullable=False),
        sa.Column("stage", sa.String(32), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_stage_rates"),
    )
    op.create_index("ix_stage_rates_worker_class_shape_stage", "stage_rates", ["worker_class", "shape", "stage"])


def downgrade() -> None:
    op.drop_index("ix_stage_rates_worker_class_shape_stage", table_name="stage_rates")
    op.drop_table("stage_rates")
