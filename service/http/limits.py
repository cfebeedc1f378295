"""Reject request bodies over Settings.max_request_bytes before anything parses them."""

from __future__ import annotations

import json

from service.core.errors import PayloadTooLarge, problem_type

BODYLESS = ("GET", "HEAD", "OPTIONS", "DELETE")  # methods whose bodies are never read


class BodySizeLimit:
    """Pure ASGI middleware: a declared Content-Length over the limit is refused at once; a body
    without one (chunked) is read up to the limit and refused if it goes past it."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] in BODYLESS:
            return await self.app(scope, receive, send)
        settings = getattr(scope["app"].state, "settings", None)
        limit = settings.max_request_bytes if settings is not None else 64 * 1024
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None:
            if not length.isdigit() or int(length) > limit:
                return await self._refuse(scope, send, limit)
            return await self.app(scope, receive, send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > limit:
                return await self._refuse(scope, send, limit)
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    async def _refuse(self, scope, send, limit: int):
        body = json.dumps(
            {
                "type": problem_type(PayloadTooLarge.slug),
                "title": PayloadTooLarge.title,
                "status": 413,
                "detail": f"request bodies are limited to {limit} bytes",
                "instance": scope["path"],
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/problem+json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
