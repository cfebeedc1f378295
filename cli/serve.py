"""`nbl serve`: the HTTP API (uvicorn), with the reconcile loop beside it in a thread, so that the
embedded default (`nbl serve` + `nbl worker`) recovers lost jobs with no third process
(service/jobs/reconcile_loop.py). docker-compose runs uvicorn itself and a reconciler apart."""

from __future__ import annotations


def add_serve(sub) -> None:
    p = sub.add_parser("serve", help="run the HTTP API")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--log-level", default="info")
    p.set_defaults(func=lambda args: serve(args.host, args.port, args.log_level))


def serve(host: str, port: int, log_level: str) -> int:
    import uvicorn

    from service.api import create_app
    from service.core.migrate import ensure_schema
    from service.core.settings import Settings
    from service.jobs import reconcile_loop

    settings = Settings()
    ensure_schema(settings)
    loop = reconcile_loop.start(settings, "serve")
    try:
        # An open event stream lasts until its job ends (or NBL_STREAM_MAX_S): a stop waits 10 s for
        # requests in flight, then closes them; clients resume with Last-Event-ID (downloads with Range).
        uvicorn.run(create_app(settings), host=host, port=port, log_level=log_level, timeout_graceful_shutdown=10)
    finally:
        loop.close()
    return 0
