"""Plain helpers for the service tests (factories and broker inspection, no mocks)."""

from __future__ import annotations

import base64
import json
import os

PG_ADMIN_URL = os.environ.get("NBL_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("NBL_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
TABLES = [
    "teams",
    "api_keys",
    "jobs",
    "job_events",
    "layer_scores",
    "metrics",
    "artifacts",
    "webhook_secrets",
    "webhook_deliveries",
    "webhook_attempts",
    "stage_rates",
    "class_caches",
]

PROBLEM_JSON = "application/problem+json"
PROBLEM_PREFIX = "tag:nbl-service,2025:problems/"


# The sizes of a tiny Llama's config.json: the API sizes every local job from them at submit (service/estimates).
TINY_CONFIG = {
    "model_type": "llama",
    "num_hidden_layers": 4,
    "max_position_embeddings": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1000,
}


def body(k=4, model="HuggingFaceTB/SmolLM2-135M-Instruct", **extra) -> dict:
    return {"model": {"id": model}, "compression": {"k": k}, **extra}


def assert_problem(resp, status: int, slug: str) -> dict:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith(PROBLEM_JSON), resp.headers["content-type"]
    p = resp.json()
    assert p["type"] == PROBLEM_PREFIX + slug, p
    assert p["status"] == status and isinstance(p["title"], str) and p["title"]
    return p


def sqla_broker_messages(settings) -> list[dict]:
    """Undelivered messages of the embedded broker (kombu's SQLAlchemy transport on SQLite):
    [{"task": name, "args": [...]}]. Empty when the broker file was never created."""
    import sqlite3

    path = settings.home / "broker.db"
    if not path.exists():
        return []
    from service.core.celery_app import default_queue

    con = sqlite3.connect(path)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "kombu_message" not in tables:
            return []
        rows = con.execute(
            "SELECT m.payload FROM kombu_message m JOIN kombu_queue q ON m.queue_id = q.id "
            "WHERE q.name = ? AND m.visible = 1 ORDER BY m.id",
            (default_queue(settings),),
        ).fetchall()
    finally:
        con.close()
    return [decode_message(r[0]) for r in rows]


def decode_message(raw: str | bytes) -> dict:
    """A kombu message (Celery protocol 2) -> {"task", "args", "kwargs"}."""
    msg = json.loads(raw)
    payload = json.loads(base64.b64decode(msg["body"]))
    args, kwargs, _embed = payload
    return {"task": msg["headers"]["task"], "args": args, "kwargs": kwargs}


def job_count(settings) -> int:
    """Rows in the jobs table of `settings`' database: 0 when a refused request left nothing behind."""
    from sqlalchemy import func, select

    from service.core.db import make_engine
    from service.core.models import Job

    engine = make_engine(settings)
    try:
        with engine.connect() as conn:
            return conn.execute(select(func.count()).select_from(Job)).scalar()
    finally:
        engine.dispose()
