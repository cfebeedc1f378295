"""The shape of the code, checked from its source (as tests/service/api/test_service_no_torch.py does for
torch): the import graph of nbl/, service/, worker/ and cli/ has no circles and runs one way, and no
file is over 300 lines.

Layers, lowest first: nbl <- service <- worker <- cli. nbl is the shared vocabulary: it imports none
of the others, and of the outside world only the standard library and pydantic (no torch, no
database). Inside the service, core (settings, DB, errors, the Celery handle) imports no domain
(jobs, estimates, ...), and the domains a job stands on (estimates, webhooks) import nothing of jobs:
a submit places the job with an estimate and queues its webhooks, never the other way. The engine
(worker/engine) imports nothing from the service and runs without it (`nbl compress`); inside the
worker, engine <- eval, publish <- pipeline <- tasks. The graph is built from the AST of every module,
imports inside functions included (they run too, only later), so a circle hidden behind a local import
is still a circle; importing `a.b.c` runs the package `a.b` too, so it counts as an import of `a.b` as well
(service/jobs/stream.py imported service.api.deps, whose package ran app.py, which imported stream: `import
service.jobs.stream` alone failed, and a graph of modules alone did not see it).

Inside the service, the HTTP plumbing (service/http: request dependencies, problem+json, the NUL, query,
body-size and per-team checks, one-hop sessions, pagination) stands below the domains, on core and keys
only, and the composition root (service/api: the app, health, docs) above them all: no other part of the
service imports it. A job's output files stand on the job (outputs reads it), never the other way. Of the
worker only the thin task touches the service's domains; the pipeline takes sizing and the output rules
from nbl. Between packages (a subpackage, or a module directly in a top package) there is no circle
either, and no circle between any two files of the tree: bench/ and tests/ included, whose scripts import
their neighbours by bare name.
"""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("nbl", "service", "worker", "cli")
MAX_LINES = 300
SIZED = ("nbl", "service", "worker", "cli", "clients", "integrations")
# What nbl may import from outside itself: the standard library and these.
NBL_THIRD_PARTY = {"pydantic"}
# The service's domains: every subpackage but core (read from the tree, so a new domain is covered).
DOMAINS = sorted(
    f"service.{p.name}" for p in (ROOT / "service").iterdir() if (p / "__init__.py").is_file() and p.name != "core"
)

# The domains under jobs: a submit checks and places the body with estimates, a job's events go out by webhooks.
JOBS_STANDS_ON = ("service.estimates", "service.webhooks")
# Every subpackage of the service, core and the composition root included.
SERVICE_PARTS = sorted(f"service.{p.name}" for p in (ROOT / "service").iterdir() if (p / "__init__.py").is_file())
# What the HTTP plumbing stands on: the settings, DB and errors, and the keys a request is authenticated by.
HTTP_STANDS_ON = ("service.core", "service.keys", "service.http")
# The worker's parts other than the thin task (worker/tasks.py), which alone reads and writes the job's row.
WORKER_PARTS = sorted(
    f"worker.{p.stem}"
    for p in (ROOT / "worker").iterdir()
    if (p.suffix == ".py" and p.stem not in ("__init__", "tasks")) or (p / "__init__.py").is_file()
)

# (importer prefix, imported prefix) pairs that must never appear: a lower layer importing a higher.
FORBIDDEN = [
    ("nbl", "service"),
    ("nbl", "worker"),
    ("nbl", "cli"),
    ("service", "worker"),
    ("service", "cli"),
    *[("service.core", domain) for domain in DOMAINS],
    *[(below, "service.jobs") for below in JOBS_STANDS_ON],
    # the composition root is above every other part of the service; the HTTP plumbing below the domains
    *[(part, "service.api") for part in SERVICE_PARTS if part != "service.api"],
    *[("service.http", part) for part in SERVICE_PARTS if part not in HTTP_STANDS_ON],
    ("service.keys", "service.http"),
    # outputs reads the job (another team's is a 404); jobs knows nothing of the output files
    ("service.jobs", "service.outputs"),
    ("worker.engine", "service"),
    ("worker", "cli"),
    *[("worker.engine", higher) for higher in ("worker.eval", "worker.publish", "worker.pipeline", "worker.tasks")],
    *[(mid, higher) for mid in ("worker.eval", "worker.publish") for higher in ("worker.pipeline", "worker.tasks")],
    # publish retries with errors.RetryPolicy: the failures errors.classify names live in errors, not in publish
    ("worker.errors", "worker.publish"),
    # the pipeline, preflight and publish take sizing and the output rules from nbl, settings and paths from core
    *[(part, domain) for part in WORKER_PARTS for domain in DOMAINS],
]

# Known violations, each one exact edge or circle, so any new one still fails. Remove an entry when it
# goes (the test says so). None today: the card is written once, at publish (worker/pipeline.py).
ALLOWED: set[tuple[str, str]] = set()
ALLOWED_CYCLES: list[list[str]] = []


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def imports(name: str, path: Path, known: set[str], search: tuple[str, ...] = ("",)) -> set[str]:
    """The project modules `name` imports, anywhere in its body. `from a import b` counts as an
    import of a.b when that is a module, else of a; either runs the packages above it too (a, and a.b's
    parents), which count unless `name` is inside them (its own packages ran before it). `search`: the
    prefixes a bare name is looked up under, in order (a script's own directory, ...), "" for the tree's."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [
                f"{base}.{a.name}" if any(f"{p}{base}.{a.name}" in known for p in search) else base for a in node.names
            ]
        else:
            continue
        for target in targets:
            prefix = next((p for p in search if f"{p}{target.partition('.')[0]}" in known), None)
            if prefix is None:
                continue  # not ours: the standard library, a third party
            target = f"{prefix}{target}"
            while target and target not in known:  # `import service.jobs.x.y`: the deepest module we have
                target = target.rpartition(".")[0]
            while target:
                if target != name and not name.startswith(target + ".") and target in known:
                    found.add(target)
                target = target.rpartition(".")[0]  # the packages it runs first
    return found


@functools.cache
def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports(name, path, known) for name, path in mods.items()}


# The rest of the tree, for circles: where each directory's modules are imported from. Packages are named
# from the directory on sys.path (clients/python for nbl_client); scripts (bench/, tests/, integrations/)
# import their neighbours by bare name: bench's put their own directory on sys.path, pytest puts a test's
# directory and tests/ (the conftest's) there.
TREE = {
    "nbl": "",
    "service": "",
    "worker": "",
    "cli": "",
    "migrations": "",
    "clients/python": "clients/python",
    "integrations/vllm/nbl_vllm": "integrations/vllm",
    "bench": None,
    "tests": None,
    "integrations/gguf": None,
    "integrations/vllm/deps.py": None,
}
SCRIPT_ROOTS = ("tests",)  # a script directory whose own root is on sys.path for every file below it


def tree_modules() -> dict[str, tuple[Path, tuple[str, ...]]]:
    """Every Python file of the tree: its module name -> (path, the prefixes its bare imports look under)."""
    out = {}
    for where, source in TREE.items():
        top = ROOT / where
        for path in sorted([top] if top.is_file() else top.rglob("*.py")):
            rel = path.relative_to(ROOT / source) if source is not None else path.relative_to(ROOT)
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join(parts)
            if source is not None:
                search = ("",)
            else:
                here = ".".join(path.parent.relative_to(ROOT).parts) + "."
                roots = [f"{r}." for r in SCRIPT_ROOTS if name.startswith(f"{r}.") and f"{r}." != here]
                search = (here, *roots, "")
            out[name] = (path, search)
    return out


@functools.cache
def tree_graph() -> dict[str, set[str]]:
    mods = tree_modules()
    known = set(mods)
    return {name: imports(name, path, known, search) for name, (path, search) in mods.items()}


def unit(module: str) -> str:
    """A module's package for the circles between packages: its subpackage of a top package, or itself
    when it sits directly in one (worker.errors, worker.publish, service.jobs, nbl.sizing)."""
    return ".".join(module.split(".")[:2])


def package_graph(g: dict[str, set[str]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for a, targets in g.items():
        for b in targets:
            if unit(a) != unit(b):
                out.setdefault(unit(a), set()).add(unit(b))
    return out


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def violations(g: dict[str, set[str]]) -> set[tuple[str, str]]:
    return {
        (a, b)
        for a, targets in g.items()
        for b in targets
        for low, high in FORBIDDEN
        if under(a, low) and under(b, high)
    }


def test_no_import_circles():
    """Between any two files of the tree, bench/ and tests/ included."""
    found = cycles(tree_graph())
    assert [c for c in found if c not in ALLOWED_CYCLES] == []
    assert [c for c in ALLOWED_CYCLES if c not in found] == [], "fixed: remove these from ALLOWED_CYCLES"


def test_no_circles_between_packages():
    """service.api <-> the domains, jobs <-> outputs, worker.errors <-> worker.publish were such circles: a
    package importing another that imports it back, through other files."""
    assert cycles(package_graph(graph())) == []


def test_imports_run_from_higher_layers_to_lower_only():
    found = violations(graph())
    assert found - ALLOWED == set(), "lower layer imports a higher one"
    assert ALLOWED - found == set(), "fixed: remove these from ALLOWED"


def private_imports(name: str, path: Path, known: set[str]) -> list[str]:
    """`from m import _x` and `m._x` where m is another project module: a private name crossing a module."""
    tree = ast.parse(path.read_text(), str(path))
    aliases, found = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({a.asname or a.name.split(".")[0]: a.name for a in node.names})
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
            for a in node.names:
                if a.name.startswith("_") and not a.name.startswith("__"):
                    found.append(f"{name}: from {node.module} import {a.name}")
                if f"{node.module}.{a.name}" in known:
                    aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and aliases[node.value.id].split(".")[0] in PACKAGES
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{name}: {node.value.id}.{node.attr}")
    return found


def test_no_private_name_crosses_a_module():
    mods = modules()
    assert [f for name, path in mods.items() for f in private_imports(name, path, set(mods))] == []


def test_the_checks_can_fail(tmp_path):
    """The graph and the rules see what they should on a known module and on made-up edges."""
    g = graph()
    assert "service.jobs.views" in g["service.jobs.outbox"]  # a top-level import
    assert "service.jobs.reconciler" in g["cli.admin"]  # an import inside a function
    assert {"service.estimates", "service"} <= g["cli.estimate"]  # the packages an import runs first
    assert "service" not in g["service.jobs.outbox"]  # ... but not the importer's own
    t = tree_graph()
    assert "bench.memory_cpu" in t["bench.estimate_accuracy"]  # a script's bare import of its neighbour
    assert "tests.testkit.service_lib" in t["tests.service.api.test_service_api"]  # a test's bare import of tests/
    assert "nbl_client" in t["cli.client.commands"] and "nbl.sizing.model" in t["bench.estimate_accuracy"]
    assert "service.http" in {unit(m) for m in g["service.jobs.endpoints"]}
    assert package_graph(
        {
            "worker.errors": {"worker.publish.hub"},
            "worker.publish.stage": {"worker.errors"},
            "worker.publish.hub": {"worker.publish.destination"},
        }
    ) == {"worker.errors": {"worker.publish"}, "worker.publish": {"worker.errors"}}
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert violations(
        {
            "service.jobs.store": {"worker.tasks"},
            "worker.engine.scoring.scores": {"worker.pipeline"},
            "worker.eval.x": {"worker.engine.y"},
            "cli.main": {"worker.tasks"},
        }
    ) == {("service.jobs.store", "worker.tasks"), ("worker.engine.scoring.scores", "worker.pipeline")}
    assert {"service.jobs", "service.estimates", "service.webhooks"} <= set(DOMAINS)
    assert violations(
        {
            "nbl.recipe": {"service.core.settings"},
            "worker.engine.calibration.data": {"service.jobs.schemas"},
            "service.core.paths": {"service.jobs.schemas"},
            "service.core.db": {"service.core.settings"},
            "service.jobs.schemas": {"nbl.recipe"},
            "worker.tasks": {"service.jobs.states"},
        }
    ) == {
        ("nbl.recipe", "service.core.settings"),
        ("worker.engine.calibration.data", "service.jobs.schemas"),
        ("service.core.paths", "service.jobs.schemas"),
    }
    assert violations(
        {
            "service.estimates.endpoints": {"service.jobs.service"},
            "service.webhooks.post": {"service.jobs"},
            "service.jobs.service": {"service.estimates.placement", "service.webhooks.signing"},
        }
    ) == {("service.estimates.endpoints", "service.jobs.service"), ("service.webhooks.post", "service.jobs")}
    assert violations(
        {
            "service.jobs.endpoints": {"service.api.deps", "service.http.deps"},
            "service.http.admission": {"service.ui.session", "service.keys.auth", "service.core.errors"},
            "service.api.app": {"service.jobs.endpoints", "service.http.query"},
            "service.jobs.disk_quota": {"service.outputs.quota"},
            "service.outputs.files": {"service.jobs"},
            "worker.errors": {"worker.publish.hub"},
            "worker.publish.stage": {"worker.errors"},
            "worker.preflight": {"service.estimates.jobs"},
            "worker.publish.local": {"service.core.paths"},
            "worker.tasks": {"service.jobs.states"},
        }
    ) == {
        ("service.jobs.endpoints", "service.api.deps"),
        ("service.http.admission", "service.ui.session"),
        ("service.jobs.disk_quota", "service.outputs.quota"),
        ("worker.errors", "worker.publish.hub"),
        ("worker.preflight", "service.estimates.jobs"),
    }
    nbl_bad = tmp_path / "nbl_bad.py"
    nbl_bad.write_text(
        "import os\nimport torch.nn\nfrom sqlalchemy import select\nfrom pydantic import BaseModel\n"
        "from . import recipe\n"
    )
    assert outside_imports(nbl_bad) == {"torch", "sqlalchemy"}
    bad = tmp_path / "bad.py"
    bad.write_text("from service.jobs.schemas import _x\nfrom service.jobs import store\nstore._y\n")
    assert private_imports("bad", bad, {"service.jobs.store"}) == [
        "bad: from service.jobs.schemas import _x",
        "bad: store._y",
    ]


def outside_imports(path: Path) -> set[str]:
    """The top-level packages a module imports (anywhere in its body) that are neither the standard
    library, nbl itself, nor NBL_THIRD_PARTY."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m != "nbl" and m not in NBL_THIRD_PARTY}


def test_nbl_stands_on_the_standard_library_and_pydantic_only():
    """No torch, no database, no web framework, no broker: nbl is what the API, the engine and the CLI
    all import, so it must not pull any of them in."""
    found = {module_name(p): outside_imports(p) for p in sorted((ROOT / "nbl").rglob("*.py"))}
    assert {m: sorted(s) for m, s in found.items() if s} == {}


def test_no_source_file_over_300_lines():
    files = subprocess.run(
        ["git", "ls-files", "--", *SIZED], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    long = {}
    for f in files:
        path = ROOT / f
        if path.is_file() and path.suffix in (".py", ".html", ".css", ".js", ".toml", ".sh", ".jinja"):
            n = len(path.read_text(errors="replace").splitlines())
            if n > MAX_LINES:
                long[f] = n
    assert long == {}


MAX_MODULES = 20  # per folder: past that a folder no longer says what is in it (issue 36; worker/engine had 50)


def folders_over(root: Path, tops: tuple[str, ...], limit: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for top in tops:
        for path in (root / top).rglob("*.py"):
            if "__pycache__" not in path.parts:
                rel = path.parent.relative_to(root).as_posix()
                counts[rel] = counts.get(rel, 0) + 1
    return {folder: n for folder, n in sorted(counts.items()) if n > limit}


def test_no_production_folder_over_20_modules(tmp_path):
    assert folders_over(ROOT, SIZED, MAX_MODULES) == {}
    # and the check sees a crowded folder, nested ones counted apart
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    for i in range(MAX_MODULES + 1):
        (tmp_path / "pkg" / f"m{i}.py").touch()
    (tmp_path / "pkg" / "sub" / "a.py").touch()
    assert folders_over(tmp_path, ("pkg",), MAX_MODULES) == {"pkg": MAX_MODULES + 1}


def test_the_cli_entry_point_imports_no_worker_code():
    """`nbl serve` (the API container's command) builds the whole `nbl` parser: that must import neither
    the worker package nor torch, so the API image runs without them."""
    import subprocess
    import sys

    code = (
        "import sys, cli.main; bad = sorted(m for m in sys.modules if m.split('.')[0] in ('worker', 'torch', "
        "'transformers')); print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
