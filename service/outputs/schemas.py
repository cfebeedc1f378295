"""Response bodies of /v1/jobs/{id}/outputs/{k}/files (its URL, and an artifact's public URI that names it, are
the job's view: service/jobs/views.py)."""

from __future__ import annotations

from typing import Literal
from urllib.parse import quote

from pydantic import BaseModel, Field

from service.jobs.views import files_url


class OutputFile(BaseModel):
    path: str = Field(description="relative to the output folder, '/'-separated", examples=["model.safetensors"])
    size: int = Field(description="bytes, as published")
    sha256: str = Field(
        description="hex SHA-256 as published; also the file's ETag",
        examples=["9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"],
    )
    url: str = Field(
        description="GET it (Range supported), relative to the API's base URL",
        examples=["/v1/jobs/job_0123/outputs/4/files/model.safetensors"],
    )


class OutputFileList(BaseModel):
    object: Literal["list"] = "list"
    job_id: str
    k: int
    data: list[OutputFile]


def file_entry(job_id: str, k: int, f: dict) -> OutputFile:
    return OutputFile(
        path=f["path"], size=f["size"], sha256=f["sha256"], url=f"{files_url(job_id, k)}/{quote(f['path'])}"
    )
