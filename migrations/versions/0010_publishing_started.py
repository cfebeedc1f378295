"""publishing: jobs.publishing_at, when the worker began publishing

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-10

Once a job's worker starts writing its outputs where the API serves them (a local folder, a Hub
commit), a cancel can no longer undo it: the API answers 409 and the job ends succeeded or failed
(service/jobs/states.py, begin_publish and request_cancel). Set once by a compare-and-set that a
cancel request has not won, never cleared, so a retried attempt of such a job stays uncancellable.
Nullable: jobs before this revision never began publishing under this rule. Frozen: plain SQLAlchemy types.
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: Union[str, Sequence[str], None] = "0009"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("publishing_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("publishing_at")
