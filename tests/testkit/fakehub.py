"""A local stand-in for the Hugging Face Hub: the parts of its HTTP API that huggingface_hub's HfApi
calls when we publish (checked against the installed client's hf_api.py / _commit_api.py):

    POST /api/repos/create                         create_repo (409 when it exists)
    GET  /api/models/{repo}[/revision/{rev}]       repo_info (create_repo's fallback on 401/403)
    POST /api/models/{repo}/branch/{branch}        create_branch (409 when it exists)
    POST /api/validate-yaml                        create_commit checks a README.md's front matter
    POST /api/models/{repo}/preupload/{rev}        upload modes: always "regular" (no LFS, no Xet), so
                                                   file contents arrive base64 in the commit itself
    POST /api/models/{repo}/commit/{rev}           the ndjson commit; ?create_pr=1 opens a PR
    GET  /api/models/{repo}/commits/{rev}          list_repo_commits, newest first
    GET  /api/models/{repo}/discussions            get_repo_discussions (pull requests)
    HEAD/GET /{repo}/resolve/{rev}/{path}          hf_hub_download of `models`' files; `gated`: GatedRepo

It keeps every commit with its full file tree, so a test checks exactly what was uploaded. A request
whose bearer token is not in `tokens` gets the Hub's own 401 (downloads need none). `fail` injects errors:
{"commit": 500} answers the next commit with a 500; {"commit": [500, 503]} the next two.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

REPO = r"(?P<repo>[^/]+/[^/]+)"
ROUTES = [
    ("POST", re.compile(r"^/api/repos/create$"), "create_repo"),
    ("POST", re.compile(r"^/api/validate-yaml$"), "validate_yaml"),
    ("POST", re.compile(rf"^/api/models/{REPO}/preupload/(?P<rev>[^/]+)$"), "preupload"),
    ("POST", re.compile(rf"^/api/models/{REPO}/commit/(?P<rev>[^/]+)$"), "commit"),
    ("GET", re.compile(rf"^/api/models/{REPO}/commits/(?P<rev>[^/]+)$"), "list_commits"),
    ("POST", re.compile(rf"^/api/models/{REPO}/branch/(?P<rev>[^/]+)$"), "create_branch"),
    ("GET", re.compile(rf"^/api/models/{REPO}/discussions$"), "discussions"),
    ("GET", re.compile(rf"^/api/models/{REPO}(?:/revision/(?P<rev>[^/]+))?$"), "repo_info"),
    ("GET", re.compile(rf"^/{REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)$"), "resolve"),
    ("HEAD", re.compile(rf"^/{REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)$"), "resolve"),
]
ANONYMOUS = {"resolve"}
# huggingface_hub (2.4) fetches its registry of AI-agent harnesses from the Hub, at most once a day per HF_HOME and
# once per process, before its first request builds a user agent: answered empty and not logged, as it is the
# library's own request, not one of ours, and whether a test's process makes it depends on what ran before.
AGENT_REGISTRY = "/api/agent-harnesses"


@dataclass
class Commit:
    id: str
    repo: str
    ref: str  # the branch or refs/pr/N it was made on
    title: str
    message: str
    files: dict[str, bytes]  # the whole tree after this commit
    added: list[str]  # the paths this commit wrote
    date: str


@dataclass
class Repo:
    id: str
    private: bool
    refs: dict[str, list[str]] = field(default_factory=dict)  # ref -> commit ids, oldest first
    prs: list[dict] = field(default_factory=list)


class FakeHub:
    def __init__(self, tokens: set[str] | None = None):
        self.tokens = set(tokens or ())
        self.repos: dict[str, Repo] = {}
        self.commits: dict[str, Commit] = {}
        self.requests: list[dict] = []  # every request: method, path, query, authorization, body (text, capped)
        self.fail: dict[str, int | list[int]] = {}  # route name -> status(es) to answer, once each
        self.models: dict[str, dict[str, bytes]] = {}  # repo -> files that hf_hub_download may fetch
        self.gated: dict[str, int] = {}  # repo -> 401 (as to no token) or 403 (no access), the Hub's GatedRepo
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # --- lifecycle ---------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def start(self) -> "FakeHub":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # --- what tests read -----------------------------------------------------------------------------

    def commits_of(self, repo: str, ref: str | None = None, *, with_initial: bool = False) -> list[Commit]:
        """Commits on one ref (or all refs), oldest first; the repo's initial commit left out by default."""
        r = self.repos.get(repo)
        if r is None:
            return []
        refs = [ref] if ref else list(r.refs)
        ids = [c for name in refs for c in r.refs.get(name, [])]
        seen, out = set(), []
        for cid in ids:
            if cid not in seen and (with_initial or self.commits[cid].title != "initial commit"):
                seen.add(cid)
                out.append(self.commits[cid])
        return out

    def files(self, repo: str, ref: str = "main") -> dict[str, bytes]:
        head = self.repos[repo].refs[ref][-1]
        return self.commits[head].files

    # --- the HTTP side -------------------------------------------------------------------------------

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _send(self, status: int, body, headers: dict | None = None) -> None:
                raw = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(raw)

            def _dispatch(self, method: str) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                auth = self.headers.get("Authorization")
                if method == "GET" and parts.path == AGENT_REGISTRY:
                    return self._send(200, {"standardEnvVars": [], "harnesses": {}})
                hub.requests.append(
                    {
                        "method": method,
                        "path": parts.path,
                        "query": parts.query,
                        "authorization": auth,
                        "body": body[:2000].decode("utf-8", "replace"),
                    }
                )
                for m, rx, name in ROUTES:
                    match = rx.match(parts.path) if m == method else None
                    if match:
                        break
                else:
                    return self._send(404, {"error": f"fake hub: no route {method} {parts.path}"})
                token = auth.removeprefix("Bearer ").strip() if auth else None
                if token not in hub.tokens and name not in ANONYMOUS:
                    return self._send(
                        401,
                        {"error": "Invalid credentials in Authorization header"},
                        {"X-Error-Message": "Invalid credentials in Authorization header"},
                    )
                if name in hub.fail:
                    status = hub._injected(name)
                    return self._send(status, {"error": f"fake hub: injected {status}"})
                args = {k: unquote(v) for k, v in match.groupdict().items() if v is not None}
                with hub.lock:
                    status, out, headers = getattr(hub, f"_{name}")(body, parse_qs(parts.query), **args)
                if isinstance(out, bytes):  # a file: raw bytes, no body for HEAD
                    self.send_response(status)
                    for k, v in {**headers, "Content-Length": str(len(out))}.items():
                        self.send_header(k, v)
                    self.end_headers()
                    return None if method == "HEAD" else self.wfile.write(out)
                self._send(status, out, headers)

            def do_GET(self):
                self._dispatch("GET")

            def do_POST(self):
                self._dispatch("POST")

            def do_HEAD(self):
                self._dispatch("HEAD")

        return Handler

    def _new_commit(
        self, repo: Repo, ref: str, title: str, message: str, added: dict[str, bytes], deleted: list[str] = ()
    ) -> Commit:
        parent = self.commits[repo.refs[ref][-1]] if repo.refs.get(ref) else None
        files = dict(parent.files) if parent else {}
        for path in deleted:
            files.pop(path, None)
        files.update(added)
        h = hashlib.sha1(f"{repo.id}\0{ref}\0{title}\0{len(self.commits)}".encode())
        for path in sorted(files):
            h.update(path.encode() + b"\0" + files[path])
        c = Commit(
            id=h.hexdigest(),
            repo=repo.id,
            ref=ref,
            title=title,
            message=message,
            files=files,
            added=sorted(added),
            date=datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
        )
        self.commits[c.id] = c
        repo.refs.setdefault(ref, []).append(c.id)
        return c

    def _injected(self, name: str) -> int:
        queued = self.fail.pop(name)
        queued = queued if isinstance(queued, list) else [queued]
        if len(queued) > 1:
            self.fail[name] = queued[1:]
        return queued[0]

    def _repo(self, repo: str) -> Repo | None:
        return self.repos.get(repo)

    # --- routes: each returns (status, json body, extra headers) -----------------------------------

    def _create_repo(self, body: bytes, query: dict):
        p = json.loads(body)
        repo_id = f"{p['organization']}/{p['name']}" if p.get("organization") else f"user/{p['name']}"
        if repo_id in self.repos:
            return 409, {"error": "You already created this model repo", "url": f"{self.url}/{repo_id}"}, None
        repo = Repo(id=repo_id, private=p.get("visibility", "private" if p.get("private") else "public") == "private")
        self.repos[repo_id] = repo
        self._new_commit(repo, "main", "initial commit", "", {".gitattributes": b"*.safetensors filter=lfs\n"})
        return 200, {"url": f"{self.url}/{repo_id}", "name": repo_id}, None

    def _repo_info(self, body: bytes, query: dict, repo: str, rev: str = "main"):
        r = self._repo(repo)
        if r is None or rev not in r.refs:
            return 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
        return 200, {"id": repo, "modelId": repo, "sha": r.refs[rev][-1], "private": r.private, "siblings": []}, None

    def _resolve(self, body: bytes, query: dict, repo: str, rev: str, path: str):
        if repo in self.gated:
            return (
                self.gated[repo],
                {"error": f"Access to model {repo} is restricted."},
                {"X-Error-Code": "GatedRepo", "X-Error-Message": f"Access to model {repo} is restricted."},
            )
        files = self.models.get(repo)
        if files is None:
            return 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
        if path not in files:
            return 404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound"}
        return (
            200,
            files[path],
            {
                "X-Repo-Commit": hashlib.sha1(repo.encode()).hexdigest(),
                "ETag": f'"{hashlib.sha1(files[path]).hexdigest()}"',
            },
        )

    def _create_branch(self, body: bytes, query: dict, repo: str, rev: str):
        r = self._repo(repo)
        if r is None:
            return 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
        if rev in r.refs:
            return 409, {"error": f"Branch {rev} already exists"}, None
        start = (json.loads(body) if body else {}).get("startingPoint") or "main"
        r.refs[rev] = list(r.refs[start])
        return 200, {}, None

    def _validate_yaml(self, body: bytes, query: dict):
        return 200, {"errors": [], "warnings": []}, None

    def _preupload(self, body: bytes, query: dict, repo: str, rev: str):
        if self._repo(repo) is None:
            return 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
        files = json.loads(body)["files"]
        return (
            200,
            {
                "files": [
                    {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False, "oid": None} for f in files
                ]
            },
            None,
        )

    def _commit(self, body: bytes, query: dict, repo: str, rev: str):
        r = self._repo(repo)
        if r is None:
            return 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
        if rev not in r.refs:
            return 404, {"error": f"Invalid rev id: {rev}"}, {"X-Error-Code": "RevisionNotFound"}
        lines = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        header = next(x["value"] for x in lines if x["key"] == "header")
        added, deleted = {}, []
        for item in lines:
            if item["key"] == "file":
                added[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
            elif item["key"] == "lfsFile":
                return 400, {"error": "fake hub: LFS uploads are not implemented (preupload said regular)"}, None
            elif item["key"] in ("deletedFile", "deletedFolder"):
                deleted.append(item["value"]["path"])
        pr_url = None
        ref = rev
        if query.get("create_pr") == ["1"]:
            num = len(r.prs) + 1
            ref = f"refs/pr/{num}"
            r.refs[ref] = list(r.refs[rev])
            pr_url = f"{self.url}/{repo}/discussions/{num}"
            r.prs.append(
                {
                    "num": num,
                    "title": header["summary"],
                    "status": "open",
                    "target": rev,
                    "createdAt": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
                }
            )
        c = self._new_commit(r, ref, header["summary"], header.get("description", ""), added, deleted)
        return (
            200,
            {
                "commitUrl": f"{self.url}/{repo}/commit/{c.id}",
                "commitOid": c.id,
                "pullRequestUrl": pr_url,
                "success": True,
            },
            None,
        )

    def _list_commits(self, body: bytes, query: dict, repo: str, rev: str):
        r = self._repo(repo)
        if r is None:
            return 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
        if rev not in r.refs:
            return 404, {"error": f"Invalid rev id: {rev}"}, {"X-Error-Code": "RevisionNotFound"}
        return (
            200,
            [
                {"id": c.id, "title": c.title, "message": c.message, "authors": [{"user": "nbl"}], "date": c.date}
                for c in (self.commits[i] for i in reversed(r.refs[rev]))
            ],
            None,
        )

    def _discussions(self, body: bytes, query: dict, repo: str):
        r = self._repo(repo)
        if r is None:
            return 404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"}
        prs = [
            {
                "title": p["title"],
                "num": p["num"],
                "author": {"name": "nbl"},
                "createdAt": p["createdAt"],
                "status": p["status"],
                "repo": {"name": repo, "type": "model"},
                "isPullRequest": True,
            }
            for p in reversed(r.prs)
        ]
        return 200, {"discussions": prs, "count": len(prs), "start": 0}, None
