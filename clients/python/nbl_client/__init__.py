"""nbl_client: the Python client of the nbl-service API (httpx and pydantic, no torch)."""

from .client import DEFAULT_URL, Client, MissingKey, NoOutput, WaitTimeout
from .download import ChecksumMismatch, Fetched, UnsafePath
from .http import ApiError, Unavailable
from .models import (
    TERMINAL,
    Artifact,
    Event,
    EventList,
    Job,
    JobError,
    JobList,
    Metrics,
    ModelInfo,
    ModelList,
    OutputFile,
    OutputFileList,
    OutputResult,
    Result,
    Usage,
    UsageMonth,
)

__all__ = [
    "DEFAULT_URL",
    "TERMINAL",
    "ApiError",
    "Artifact",
    "ChecksumMismatch",
    "Client",
    "Event",
    "EventList",
    "Metrics",
    "ModelInfo",
    "ModelList",
    "OutputResult",
    "Result",
    "Usage",
    "UsageMonth",
    "Fetched",
    "Job",
    "JobError",
    "JobList",
    "MissingKey",
    "NoOutput",
    "OutputFile",
    "OutputFileList",
    "Unavailable",
    "UnsafePath",
    "WaitTimeout",
]
