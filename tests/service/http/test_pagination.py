"""The one cursor of the paged lists (service/http/pagination.py): GET /v1/jobs, /v1/usage and /v1/models
each read only their own version's cursors; anything else is the same 422 on `after`."""

from __future__ import annotations

import re

import pytest

from service.catalog import models, usage
from service.core.errors import InvalidRequest
from service.http.pagination import bad_cursor, cursor_value, decode_cursor, encode_cursor
from service.jobs import service as jobs

JOB = "job_" + "0" * 32


def test_a_cursor_reads_back_in_its_own_list_only():
    assert decode_cursor(encode_cursor("v1", JOB), "v1", re.compile(r"job_[0-9a-f]{32}")) == JOB
    assert encode_cursor("v1", JOB).rstrip("=") == encode_cursor("v1", JOB)  # unpadded, url-safe
    assert cursor_value(encode_cursor("u1", "2026-01"), "u1") == "2026-01"
    assert cursor_value(encode_cursor("u1", "2026-01"), "v1") is None  # a month is no job's cursor
    assert cursor_value("%%%", "v1") is None and cursor_value("", "v1") is None
    assert {jobs.CURSOR, usage.CURSOR, models.CURSOR} == {"v1", "u1", "m1"}


@pytest.mark.parametrize("cursor", [encode_cursor("u1", JOB), encode_cursor("v1", "job_x"), "not base64!", "djE"])
def test_anything_else_is_a_422_on_after(cursor):
    with pytest.raises(InvalidRequest) as e:
        decode_cursor(cursor, "v1", re.compile(r"job_[0-9a-f]{32}"))
    assert e.value.detail == bad_cursor().detail == "`after` is not a cursor this API returned"
    assert e.value.errors == [{"loc": ["query", "after"], "msg": "invalid cursor", "type": "value_error"}]
