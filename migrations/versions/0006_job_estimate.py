"""jobs.estimate: each job's estimate (memory, disk, time, worker class) from service/estimates

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

Computed at submit from the model's config.json; its worker_class is the Celery queue the job is
sent to, by the API and by every re-send of the reconciler. Nullable: jobs created before this
revision, and Hub jobs submitted while the Hub was unreachable, have none (they go to the first
class's queue and the worker checks them against its own devices). Frozen: plain SQLAlchemy types.
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: Union[str, Sequence[str], None] = "0005"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("estimate", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("estimate")
