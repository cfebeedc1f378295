"""measured selection: jobs.selection (the layer sets measured on the selection data)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02

A job with criterion greedy or auto, or k auto (worker/engine/selection/auto_k.py), stores what its selection measured:
the criterion that won, the data and its token count, and every layer set tried with its held-out perplexity,
for GET /v1/jobs/{id} to show. Nullable: other jobs, and jobs before this revision, have none.
Frozen: plain SQLAlchemy types.
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: Union[str, Sequence[str], None] = "0008"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("selection", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("selection")
