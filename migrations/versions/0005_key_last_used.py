"""keys: api_keys.last_used_at, for `nbl admin list-keys`

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

Set on authentication at most once a minute per key (service/keys/auth.py), so a busy key costs one
write a minute, not one per request. Nullable: a key never used since (or created before) this
revision has none. batch_alter_table so that SQLite, which cannot drop a column in place, copies
the table; Postgres alters in place. Frozen: plain SQLAlchemy types.
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: Union[str, Sequence[str], None] = "0004"
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("last_used_at")
