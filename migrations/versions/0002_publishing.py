"""publishing: encrypted Hub tokens (teams, jobs)

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

A team's Hub token (`nbl admin set-hub-token`) and a job's own (`publish.token`, cleared when the job
ends), both Fernet ciphertext (service/core/secrets.py), never plaintext. The publish records themselves
are rows of `artifacts` (kind "hub": repo URL, revision, commit sha), which 0001 already has.
batch_alter_table so that SQLite, which cannot ALTER much, copies the table; Postgres alters in place.
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: Union[str, Sequence[str], None] = "0001"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

TABLES = ("teams", "jobs")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column("hub_token_encrypted", sa.Text(), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_column("hub_token_encrypted")
