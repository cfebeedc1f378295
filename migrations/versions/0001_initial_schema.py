"""initial schema: teams, api_keys, jobs, job_events, layer_scores, metrics, artifacts

Revision ID: 0001
Revises:
Create Date: 2026-11-30

Frozen on purpose: plain SQLAlchemy types, nothing imported from service.core.models (the UTC
TypeDecorator there stores DateTime(timezone=True)).
"""

from typing import Sequence, Union

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: Union[str, Sequence[str], None] = None
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BIGID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def ts(name: str, nullable: bool = True) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "teams",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("max_active_jobs", sa.Integer(), nullable=True),
        ts("created_at", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_teams")),
        sa.UniqueConstraint("name", name=op.f("uq_teams_name")),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("name", sa.String(64), nullable=True),
        ts("created_at", nullable=False),
        ts("revoked_at"),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name=op.f("fk_api_keys_team_id_teams"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    op.create_index(op.f("ix_api_keys_team_id"), "api_keys", ["team_id"])

    op.create_table(
        "jobs",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("team_id", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("stage", sa.String(32), nullable=True),
        sa.Column("progress", sa.Float(), nullable=False),
        sa.Column("eta_seconds", sa.Float(), nullable=True),
        sa.Column("spec", JSON, nullable=False),
        sa.Column("idempotency_key", sa.String(255), nullable=True),
        sa.Column("request_hash", sa.String(64), nullable=True),
        sa.Column("error_type", sa.String(16), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("selected_layers", JSON, nullable=True),
        sa.Column("metrics", JSON, nullable=True),
        ts("created_at", nullable=False),
        ts("started_at"),
        ts("finished_at"),
        ts("updated_at", nullable=False),
        ts("dispatched_at"),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("lease_token", sa.String(64), nullable=True),
        ts("lease_expires_at"),
        ts("heartbeat_at"),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.CheckConstraint(
            "error_type IS NULL OR error_type IN ('user', 'system', 'timeout')", name=op.f("ck_jobs_error_type")
        ),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'cancelling', 'succeeded', 'failed', 'cancelled')",
            name=op.f("ck_jobs_status"),
        ),
        sa.CheckConstraint("progress >= 0 AND progress <= 1", name=op.f("ck_jobs_progress")),
        sa.ForeignKeyConstraint(["team_id"], ["teams.id"], name=op.f("fk_jobs_team_id_teams"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_jobs")),
        sa.UniqueConstraint("team_id", "idempotency_key", name=op.f("uq_jobs_team_id_idempotency_key")),
    )
    op.create_index("ix_jobs_status_created_at", "jobs", ["status", "created_at"])
    op.create_index("ix_jobs_team_id_id", "jobs", ["team_id", "id"])

    op.create_table(
        "artifacts",
        sa.Column("id", BIGID, autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("k", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("uri", sa.Text(), nullable=False),
        sa.Column("revision", sa.String(255), nullable=True),
        sa.Column("commit_sha", sa.String(64), nullable=True),
        ts("created_at", nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_artifacts_job_id_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_artifacts")),
    )
    op.create_index(op.f("ix_artifacts_job_id"), "artifacts", ["job_id"])

    op.create_table(
        "job_events",
        sa.Column("id", BIGID, autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        ts("created_at", nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("stage", sa.String(32), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("progress", sa.Float(), nullable=True),
        sa.Column("data", JSON, nullable=True),
        sa.CheckConstraint(
            "kind IN ('stage', 'progress', 'warning', 'status', 'log')", name=op.f("ck_job_events_kind")
        ),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_job_events_job_id_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_events")),
    )
    op.create_index("ix_job_events_job_id_id", "job_events", ["job_id", "id"])

    op.create_table(
        "layer_scores",
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("layer", sa.Integer(), nullable=False),
        sa.Column("mode", sa.String(8), nullable=False),
        *(
            sa.Column(c, sa.Float(), nullable=True)
            for c in ("cca_bound", "nmse", "cosine", "cond", "heldout_nmse", "loss_rise")
        ),
        sa.CheckConstraint("mode IN ('attn', 'block')", name=op.f("ck_layer_scores_mode")),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_layer_scores_job_id_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "layer", "mode", name=op.f("pk_layer_scores")),
    )
    op.create_table(
        "metrics",
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("variant", sa.String(32), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], name=op.f("fk_metrics_job_id_jobs"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "variant", "name", name=op.f("pk_metrics")),
    )


def downgrade() -> None:
    op.drop_table("metrics")
    op.drop_table("layer_scores")
    op.drop_index("ix_job_events_job_id_id", table_name="job_events")
    op.drop_table("job_events")
    op.drop_index(op.f("ix_artifacts_job_id"), table_name="artifacts")
    op.drop_table("artifacts")
    op.drop_index("ix_jobs_team_id_id", table_name="jobs")
    op.drop_index("ix_jobs_status_created_at", table_name="jobs")
    op.drop_table("jobs")
    op.drop_index(op.f("ix_api_keys_team_id"), table_name="api_keys")
    op.drop_table("api_keys")
    op.drop_table("teams")
