"""Settings (service/core/settings.py) is the only reader of NBL_* variables in worker/, service/ and cli/:
the engine, the evaluation, the worker, the service and the entry points take directories and limits from a
Settings built at the top. A source scan: every use of os.environ / os.getenv there outside the settings
module is refused, except the few listed below, which say why and never name an NBL_ variable. Outside
them, the Python client (clients/python/nbl_client/client.py), installed on its own without Settings, reads
NBL_API_URL and NBL_API_KEY for itself, and for the `nbl` client commands that use it."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SETTINGS = "service/core/settings.py"
PACKAGES = ("worker", "service", "cli")

# path -> why it may touch the environment (none of them reads an NBL_ variable)
ALLOWED = {
    "worker/engine/calibration/distributed.py": "sets GLOO_SOCKET_IFNAME for torch.distributed's processes on one host",
    "worker/subproc.py": "hands the worker's environment, secrets removed, to the subprocesses a job starts "
    "(llama.cpp's converter, the load check's child)",
    "worker/eval/benchmarks/lmeval.py": "forces HF_HUB_OFFLINE / HF_DATASETS_OFFLINE while lm-eval loads tasks",
    "cli/admin.py": "`nbl admin set-hub-token` reads the token, a one-off secret input, from the environment "
    "or stdin (read_secret), never a setting",
}


def environ_uses(source: str) -> list[tuple[int, bool]]:
    """(line, names an NBL_ variable) for every statement that touches os.environ or os.getenv."""
    tree = ast.parse(source)
    aliases = {"environ", "environb", "getenv", "getenvb"}
    local = {
        a.asname or a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and n.module == "os"
        for a in n.names
        if a.name in aliases
    }

    def touches(node: ast.AST) -> bool:
        return any(
            (
                isinstance(n, ast.Attribute)
                and n.attr in aliases
                and isinstance(n.value, ast.Name)
                and n.value.id == "os"
            )
            or (isinstance(n, ast.Name) and n.id in local)
            for n in ast.walk(node)
        )

    uses = []
    for stmt in ast.walk(tree):
        if not isinstance(stmt, ast.stmt) or isinstance(
            stmt, (ast.FunctionDef, ast.ClassDef, ast.If, ast.For, ast.While, ast.With, ast.Try)
        ):
            continue  # compound statements: their inner statements are visited one by one
        if touches(stmt):
            nbl = any(
                isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.startswith("NBL_")
                for n in ast.walk(stmt)
            )
            uses.append((stmt.lineno, nbl))
    return sorted(uses)


def sources():
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            if rel != SETTINGS:
                yield rel, path.read_text()


def test_the_scan_sees_every_spelling():
    src = (
        "import os\nfrom os import environ as env, getenv\n"
        'a = os.environ.get("NBL_A")\nb = os.getenv("NBL_B")\nc = env["NBL_C"]\nd = getenv("NBL_D")\n'
        'if True:\n    e = {k: os.environ[k] for k in ("NBL_E",)}\nf = os.environ.get(name)\n'
        'def g():\n    return os.environ.copy()\nh = "NBL_H"\n'
    )
    assert environ_uses(src) == [(3, True), (4, True), (5, True), (6, True), (8, True), (9, False), (11, False)]


def test_settings_is_the_only_reader_of_nbl_variables():
    assert (REPO / SETTINGS).is_file(), "the settings module moved: update SETTINGS"
    refused, allowed_seen = [], set()
    for rel, source in sources():
        for line, nbl in environ_uses(source):
            if nbl or rel not in ALLOWED:
                refused.append(f"{rel}:{line}")
            else:
                allowed_seen.add(rel)
    assert refused == [], "read the value from Settings at the top and pass it down: " + ", ".join(refused)
    assert allowed_seen == set(ALLOWED), f"no longer touch the environment, drop them: {set(ALLOWED) - allowed_seen}"
