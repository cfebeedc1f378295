"""reliability: reconciler bookkeeping (attempt limits, failure reasons)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

jobs.lease_owner: host:pid of the worker that holds (or last held) the lease, shown in the
reconciler's failure reason and its logs. An index on (status, lease_expires_at) for the
reconciler's periodic scan for expired leases. Attempts (jobs.attempt) exist since 0001.
batch_alter_table so that SQLite, which cannot ALTER much, copies the table; Postgres alters in place.
Frozen: plain SQLAlchemy types.
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: Union[str, Sequence[str], None] = "0002"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("lease_owner", sa.String(255), nullable=True))
    op.create_index("ix_jobs_status_lease_expires_at", "jobs", ["status", "lease_expires_at"])


def downgrade() -> None:
    op.drop_index("ix_jobs_status_lease_expires_at", table_name="jobs")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("lease_owner")
