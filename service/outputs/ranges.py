"""HTTP Range for one file (RFC 9110 section 14): one range of bytes, so a download can resume.

    byte_range("bytes=0-99", 1000)   -> (0, 99)      first bytes
    byte_range("bytes=500-", 1000)   -> (500, 999)   from an offset (a resume)
    byte_range("bytes=-100", 1000)   -> (900, 999)   the last 100 bytes
    byte_range("bytes=1000-", 1000)  -> Unsatisfiable (416)

What the RFC lets a server ignore is ignored, and the whole file is served (200): a header that
does not parse, a unit other than bytes, several ranges (multipart answers are not worth their
weight here), and an If-Range that does not match the current ETag (the file changed: start over).
"""

from __future__ import annotations

import re

_RANGE = re.compile(r"bytes=(\d*)-(\d*)")


class Unsatisfiable(Exception):
    """No byte of the file is in the range: 416 with `Content-Range: bytes */SIZE`."""


def byte_range(header: str | None, size: int, *, if_range: str | None = None, etag: str = "") -> tuple[int, int] | None:
    """The inclusive (first, last) byte to send, or None for the whole file."""
    if not header or (if_range is not None and if_range.strip() != etag):
        return None
    m = _RANGE.fullmatch(header.strip())
    if not m or (not m[1] and not m[2]):
        return None  # not understood, or several ranges: ignored
    if not m[1]:  # suffix: the last N bytes
        n = int(m[2])
        if n == 0 or size == 0:
            raise Unsatisfiable
        return max(size - n, 0), size - 1
    first = int(m[1])
    if m[2] and int(m[2]) < first:
        return None  # invalid: ignored
    if first >= size:
        raise Unsatisfiable
    return first, min(int(m[2]) if m[2] else size - 1, size - 1)
