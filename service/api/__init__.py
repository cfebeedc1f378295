"""The /v1 HTTP API (FastAPI): the composition root. app.py builds the app from the domains' routers and the
HTTP plumbing (service/http); health.py and docs.py are its own routes. Nothing else in the service imports
this package (tests/test_layers.py)."""

from .app import create_app

__all__ = ["create_app"]
