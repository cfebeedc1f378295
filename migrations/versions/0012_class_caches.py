"""class_caches: what a worker class holds for later jobs (issue 28)

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04

class_caches: one row per (worker class, kind, key) the class's workers filled: a model's files on its disk
(kind `model`) and a base model's evaluation in its cache (kind `base_evaluation`), under the request-level
keys of nbl/sizing/reuse.py; the estimate then prices a load without fetching the weights and the
outputs' evaluation alone. New table only. Frozen: plain SQLAlchemy types.
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: Union[str, Sequence[str], None] = "0011"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        "class_caches",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("worker_class", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("job_id", sa.String(36), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_class_caches"),
    )
    op.create_index(
        "ix_class_caches_worker_class_kind_key", "class_caches", ["worker_class", "kind", "key"], unique=True
    )


def downgrade() -> None:
    op.drop_index("ix_class_caches_worker_class_kind_key", table_name="class_caches")
    op.drop_table("class_caches")
