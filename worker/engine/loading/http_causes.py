"""What an exception says about HTTP: the status it carries, whether it is a transport failure, and the
chain of causes to look through (libraries wrap the Hub's answer: `datasets` raises a FileNotFoundError
`from None` over a Hub 500, huggingface_hub a LocalEntryNotFoundError over a refused connection).

Shared by the job's table of failures (worker/errors.py) and the input model's Hub access
(hub_access.py), which must read an answer the same way.
"""

from __future__ import annotations

import importlib

GATED = "gated or private: set a token with access"


def _classes(spec: list[tuple[str, str]]) -> tuple[type[BaseException], ...]:
    """The named exception classes of whichever HTTP libraries are installed (httpx for huggingface_hub 1.x,
    httpx2 for 2.x, requests and aiohttp under datasets / fsspec)."""
    found: list[type[BaseException]] = []
    for module, name in spec:
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            pass
    return tuple(found)


TRANSPORT = (ConnectionError, TimeoutError) + _classes(
    [
        ("httpx", "TransportError"),
        ("httpx2", "TransportError"),
        ("requests", "ConnectionError"),
        ("requests", "Timeout"),
        ("aiohttp", "ClientConnectionError"),
        ("urllib3.exceptions", "HTTPError"),
    ]
)
GATED_ERRORS = _classes([("huggingface_hub.errors", "GatedRepoError")])
NOT_FOUND = _classes(
    [
        ("huggingface_hub.errors", "RepositoryNotFoundError"),
        ("huggingface_hub.errors", "RevisionNotFoundError"),
        ("huggingface_hub.errors", "RemoteEntryNotFoundError"),
    ]
)


def status_of(exc: BaseException) -> int | None:
    """The HTTP status an exception carries: `.response.status_code` (httpx, httpx2, requests,
    huggingface_hub), or `.status` (aiohttp)."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None) if response is not None else None
    if status is None and type(exc).__module__.startswith("aiohttp"):
        status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def chain(exc: BaseException) -> list[BaseException]:
    """exc, then what caused it (__cause__, else __context__), innermost last; each exception once."""
    out: list[BaseException] = []
    while exc is not None and exc not in out:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out
