"""stage_rates.kind: measured rates per stage and per kind of work (issue 38)

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05

A stage's rate depends on what it did: a calibration that read the statistics cache took seconds where a
fresh one took minutes, and folding those rows together pulled the fresh calibration's price down with each
cache hit. Each row now says its kind (nbl/sizing/kinds.py: `fresh` / `cached` calibration and scoring,
`gguf:TYPE` exports, `FORM/MODE` saves and checks), and the estimate reads only the rows of the kind a job
will do. Rows written before carry no kind (''), which no kinded stage reads: those stages start again from
the next job. Frozen: plain SQLAlchemy types.
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: Union[str, Sequence[str], None] = "0012"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("stage_rates") as batch:
        batch.add_column(sa.Column("kind", sa.String(64), nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("stage_rates") as batch:
        batch.drop_column("kind")
