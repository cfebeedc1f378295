"""nbl_client: the Python client of the nbl-service API (httpx and pydantic, no torch)."""

from .client import DEFAULT_URL, Client, MissingKey, WaitTimeout
from .http import ApiError, Unavailable
from .models import TERMINAL, Artifact, Event, EventList, Job, JobError, JobList

__all__ = ["DEFAULT_URL", "TERMINAL", "ApiError", "Artifact", "Client", "Event", "EventList", "Job", "JobError",
           "JobList", "MissingKey", "Unavailable", "WaitTimeout"]
