"""The Hugging Face Hub destination: one commit per output, and never two.

    create_repo(exist_ok=True)  private unless asked otherwise
    create_branch(exist_ok)     when publishing to a branch other than main
    adopt                       a commit (or pull request) whose message carries this job's marker
                                `[nbl-job: <job id> k=<k>]` is this output already published: record it
    create_commit               else one commit (or a PR with create_pr) through the client's own upload
                                path, which sends large files by LFS / Xet as the Hub asks
    publish_root                several outputs (`k{K}/`): one more commit, marked `[nbl-job: <id> root]`,
                                with the root README.md that the Hub renders (worker/publish/root_card.py)

Why adopt: a worker can die after the Hub accepted the commit and before the job row recorded it; the
retry then finds its own commit instead of pushing a duplicate. The marker is in the commit title
(and so the PR title), where list_repo_commits / get_repo_discussions show it.

Errors become one of two exceptions with a message fit for the job row, with the token scrubbed from
it: HubRefused (401/403/404: the token or the repo is wrong; a user error) and HubUnavailable
(anything else, e.g. 5xx or no connection; a system error, worth a retry), both defined in worker/errors.py,
the table that classes them.
"""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

from ..errors import HubRefused, HubUnavailable
from .destination import Published

log = logging.getLogger(__name__)


def transport_errors() -> tuple[type[BaseException], ...]:
    """Connection-level failures of the client's HTTP library (httpx for huggingface_hub 1.x, httpx2
    for 2.x), whichever is installed."""
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]  # not all OSErrors: a missing file is ours
    for name in ("httpx2", "httpx"):
        try:
            errors.append(importlib.import_module(name).TransportError)
        except (ImportError, AttributeError):
            pass
    return tuple(errors)


def marker(job_id: str, k: int | None) -> str:
    """The job marker of output k, or (k None) of the root card over several outputs."""
    return f"[nbl-job: {job_id} {'root' if k is None else f'k={k}'}]"


def scrub(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text


def operations(staged: Path, prefix: str) -> list:
    """Every file of the staged folder as an addition. create_commit rather than upload_folder: only it
    opens a pull request against a branch other than main."""
    from huggingface_hub import CommitOperationAdd

    return [
        CommitOperationAdd(path_in_repo=prefix + f.relative_to(staged).as_posix(), path_or_fileobj=str(f))
        for f in sorted(staged.rglob("*"))
        if f.is_file()
    ]


class HubRepo:
    def __init__(
        self,
        repo_id: str,
        token: str,
        job_id: str,
        *,
        private: bool = True,
        revision: str | None = None,
        create_pr: bool = False,
        endpoint: str | None = None,
        title: str = "NBL compressed model",
    ):
        self.repo_id, self.job_id, self.title = repo_id, job_id, title
        self.private, self.revision, self.create_pr = private, revision, create_pr
        self.endpoint = endpoint
        self._token = token

    def __repr__(self) -> str:  # never the token
        return f"HubRepo({self.repo_id!r}, revision={self.revision!r}, create_pr={self.create_pr})"

    def location(self, k: int, several: bool) -> tuple[str, str | None]:
        return self.repo_id, (f"k{k}" if several else None)

    def check_space(self, adding: int) -> None:
        """The Hub's storage is not ours to bound: no quota."""

    def publish(self, staged: Path, k: int, several: bool) -> Published:
        return self._commit_once(
            Path(staged), f"k{k}/" if several else "", marker(self.job_id, k), f"{self.title} (k={k})"
        )

    def publish_root(self, staged: Path) -> Published:
        """The folder holding the root README.md, committed at the repo's root (once, like an output)."""
        return self._commit_once(Path(staged), "", marker(self.job_id, None), f"{self.title}: the outputs' card")

    def _commit_once(self, staged: Path, prefix: str, mark: str, summary: str) -> Published:
        from huggingface_hub import HfApi
        from huggingface_hub.errors import HfHubHTTPError

        api = HfApi(endpoint=self.endpoint, token=self._token, library_name="nbl-service")
        try:
            return self._publish(api, staged, prefix, mark, summary)
        except HfHubHTTPError as e:
            status = e.response.status_code if e.response is not None else None
            detail = scrub(str(e).strip().splitlines()[0] if str(e).strip() else "", self._token)
            if status in (401, 403, 404):
                what = {
                    401: "rejected the token (401 Unauthorized)",
                    403: "refused write access (403 Forbidden)",
                    404: "cannot find the repo, or the token cannot see it (404)",
                }[status]
                raise HubRefused(
                    f"publishing to the Hub: {self._host()} {what} for {self.repo_id}; give a valid "
                    "write token (`nbl admin set-hub-token --team NAME`, or publish.token)"
                    f" [{detail}]"
                ) from None
            raise HubUnavailable(
                f"publishing to the Hub: {self._host()} answered {status} for {self.repo_id} [{detail}]"
            ) from None
        except transport_errors() as e:
            raise HubUnavailable(
                f"publishing to the Hub: cannot reach {self._host()}: {scrub(f'{type(e).__name__}: {e}', self._token)}"
            ) from None

    def _host(self) -> str:
        return self.endpoint or "the Hub"

    def _publish(self, api, staged: Path, prefix: str, mark: str, summary: str) -> Published:
        repo_url = str(api.create_repo(self.repo_id, private=self.private, exist_ok=True))
        if self.revision and self.revision != "main":
            api.create_branch(self.repo_id, branch=self.revision, exist_ok=True)
        found = self._find(api, mark, repo_url)
        if found is not None:
            log.info("%s %s already published as %s@%s: adopted", self.repo_id, mark, found.revision, found.commit_sha)
            return found
        info = api.create_commit(
            self.repo_id,
            operations=operations(staged, prefix),
            commit_message=f"{summary} {mark}",
            commit_description="Published by nbl-service: Neural Block Linearization (arXiv 2505.21077). "
            "See README.md for the recipe and the evaluation.",
            revision=self.revision,
            create_pr=self.create_pr,
        )
        revision = f"refs/pr/{info.pr_num}" if self.create_pr and info.pr_num is not None else self.revision or "main"
        return Published(kind="hub", uri=info.pr_url or repo_url, revision=revision, commit_sha=info.oid)

    def _find(self, api, mark: str, repo_url: str) -> Published | None:
        """The commit (or PR) an earlier attempt of this job made for this output, if any."""
        if self.create_pr:
            for pr in api.get_repo_discussions(self.repo_id, discussion_type="pull_request"):
                if mark in pr.title:
                    ref = f"refs/pr/{pr.num}"
                    sha = self._marked_commit(api, ref, mark)
                    if sha is not None:
                        return Published(kind="hub", uri=pr.url, revision=ref, commit_sha=sha, adopted=True)
            return None
        revision = self.revision or "main"
        sha = self._marked_commit(api, revision, mark)
        return (
            None
            if sha is None
            else Published(kind="hub", uri=repo_url, revision=revision, commit_sha=sha, adopted=True)
        )

    def _marked_commit(self, api, revision: str, mark: str) -> str | None:
        for commit in api.list_repo_commits(self.repo_id, revision=revision):
            if mark in (commit.title or "") or mark in (commit.message or ""):
                return commit.commit_id
        return None
