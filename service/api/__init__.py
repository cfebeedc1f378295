"""The /v1 HTTP API (FastAPI)."""

from .app import create_app

__all__ = ["create_app"]
