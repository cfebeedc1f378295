"""quality gates: jobs.gates (the gate checks of a job) and error_type `quality`

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

A job with `gates` (nbl/gates.py) stores its checks, {"passed", "checks": [...]}, for GET
/v1/jobs/{id} to show; a job whose outputs all failed them ends `failed` with error_type `quality`,
which the CHECK constraint now allows. Nullable: jobs without gates, and jobs before this revision,
have none. The downgrade turns `quality` failures into `user` ones (the gates were the request's) so
the older constraint holds. batch_alter_table: SQLite copies the table; Postgres alters in place.
Frozen: plain SQLAlchemy types.
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: Union[str, Sequence[str], None] = "0006"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
OLD = "error_type IS NULL OR error_type IN ('user', 'system', 'timeout')"
NEW = "error_type IS NULL OR error_type IN ('user', 'system', 'timeout', 'quality')"


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("gates", JSON, nullable=True))
        batch.drop_constraint(op.f("ck_jobs_error_type"), type_="check")
        batch.create_check_constraint(op.f("ck_jobs_error_type"), NEW)


def downgrade() -> None:
    op.execute("UPDATE jobs SET error_type = 'user' WHERE error_type = 'quality'")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_constraint(op.f("ck_jobs_error_type"), type_="check")
        batch.create_check_constraint(op.f("ck_jobs_error_type"), OLD)
        batch.drop_column("gates")
