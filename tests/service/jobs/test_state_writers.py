"""The job's state machine, service/jobs/states.py and its lease's transitions (service/jobs/lease.py), is the
one writer of a job's status, of its status events and of its webhook outbox rows. This reads the source of
service/, worker/ and cli/ (their AST) and fails on any other module that writes one, so a new writer
elsewhere cannot slip in."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
OWNERS = ("service/jobs/states.py", "service/jobs/lease.py")  # the state machine, in two files
PACKAGES = ("service", "worker", "cli")
RAW_SQL = re.compile(r"(update\s+jobs\s+set|insert\s+into\s+(jobs|job_events|webhook_deliveries))\b", re.I)


def _inner_calls(node: ast.AST):
    """The calls a method chain is built on: update(Job).where(...).values(...) -> update(Job), ..."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value
        if isinstance(node, ast.Call):
            yield node


def _is(node: ast.AST, name: str) -> bool:
    return (isinstance(node, ast.Name) and node.id == name) or (isinstance(node, ast.Attribute) and node.attr == name)


def _keys_status(fn: ast.AST) -> bool:
    """Whether a function builds a mapping with a "status" key ({"status": ..}, d["status"], dict(status=..)),
    which `.values(**d)` may then write."""
    for n in ast.walk(fn):
        if isinstance(n, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "status" for k in n.keys):
            return True
        if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value == "status":
            return True
        if isinstance(n, ast.Call) and _is(n.func, "dict") and any(k.arg == "status" for k in n.keywords):
            return True
    return False


def _job_status_updates(tree: ast.AST) -> set[int]:
    """Lines of update(Job)...values(...) that write the status: by keyword, a positional mapping, or
    ** of a mapping that the same function gives a "status" key."""
    lines = set()
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            continue
        keyed = not isinstance(fn, ast.Module) and _keys_status(fn)
        for node in ast.walk(fn):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "values"):
                continue
            kwargs = {k.arg for k in node.keywords}
            if not ("status" in kwargs or node.args or (None in kwargs and keyed)):
                continue
            if any(_is(c.func, "update") and c.args and _is(c.args[0], "Job") for c in _inner_calls(node)):
                lines.add(node.lineno)
    return lines


def _names_a_job(node: ast.AST) -> bool:
    """`job.status = ...`, `self.job.status = ...`, `j.status = ...`: an ORM object's attribute
    can't be typed from the AST, so go by the name (a Move's or a response's status is not a job's)."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name == "j" or "job" in name.lower()


def writers(source: str) -> list[str]:
    """What `source` writes that only the owners (states.py, lease.py) may: one line per finding."""
    tree = ast.parse(source)
    found = [f"{line}: update(Job).values(status=...)" for line in sorted(_job_status_updates(tree))]
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Call):
            kwargs = {k.arg for k in node.keywords}
            if _is(node.func, "JobEvent"):
                found.append(f"{line}: JobEvent(...)")
            if _is(node.func, "Job") and "status" in kwargs:
                found.append(f"{line}: Job(status=...)")
            if _is(node.func, "insert") and node.args and _is(node.args[0], "Job"):
                found.append(f"{line}: insert(Job)")
            if _is(node.func, "WebhookDelivery"):
                found.append(f"{line}: WebhookDelivery(...)")
        if isinstance(node, ast.Attribute) and node.attr == "enqueue" and _is(node.value, "outbox"):
            found.append(f"{line}: outbox.enqueue")
        if (
            isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith(("service.jobs.outbox", "service.webhooks"))
            and any(a.name == "enqueue" for a in node.names)
        ):
            found.append(f"{line}: import of the outbox's enqueue")
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for el in t.elts if isinstance(t, ast.Tuple) else [t]:
                    if isinstance(el, ast.Attribute) and el.attr == "status" and _names_a_job(el.value):
                        found.append(f"{line}: job.status = ...")
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and RAW_SQL.search(node.value):
            found.append(f"{line}: raw SQL write")
    return found


def test_only_states_writes_a_status_an_event_of_it_or_an_outbox_row():
    """The outbox module may build its own rows (that is what `enqueue` does); nobody else may."""
    offenders = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in OWNERS:
                continue
            found = writers(path.read_text())
            if rel == "service/jobs/outbox.py":
                found = [f for f in found if not f.endswith("WebhookDelivery(...)")]
            offenders += [f"{rel}:{f}" for f in found]
    assert offenders == []


def test_the_owner_itself_is_seen_writing():
    """The scan finds the owners' own writes, so a scan that finds nothing elsewhere means something."""
    found = [f for owner in OWNERS for f in writers((ROOT / owner).read_text())]
    assert any("update(Job).values" in f for f in found)
    assert any("JobEvent" in f for f in found)
    assert any("outbox.enqueue" in f for f in found)


def test_the_scan_catches_each_kind_of_writer():
    snippets = {
        "def f(s, job):\n    job.status = 'failed'\n": "job.status = ...",
        "def f(s, j):\n    j.stage, j.status = 'x', 'failed'\n": "job.status = ...",
        "def f(self):\n    self.job.status = 'failed'\n": "job.status = ...",
        "def f(s):\n    s.execute(update(Job).where(Job.id == 1).values(status='queued'))\n": "update(Job)",
        "def f(s):\n    v = {'status': 'failed'}\n    s.execute(update(Job).values(**v))\n": "update(Job)",
        "def f(s):\n    s.add(JobEvent(job_id='j', kind='status'))\n": "JobEvent",
        "def f(s):\n    s.add(Job(id='j', status='queued'))\n": "Job(status",
        "def f(s):\n    outbox.enqueue(s, 'j', 'failed')\n": "outbox.enqueue",
        "from service.jobs.outbox import enqueue\n": "enqueue",
        "def f(s):\n    s.execute(text('UPDATE jobs SET status = 1'))\n": "raw SQL",
    }
    for source, what in snippets.items():
        assert any(what in f for f in writers(source)), source
    # Not writers: a progress update, and .status on something that is not a job.
    assert writers("def f(s):\n    s.execute(update(Job).values(stage='x', progress=0.5))\n") == []
    assert writers("def f(s, v):\n    v['stage'] = 'x'\n    s.execute(update(Job).values(**v))\n") == []
    assert writers("def f(m):\n    m.status = 'moved'\n") == []
