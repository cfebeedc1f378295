"""The body of `nbl submit`'s POST /v1/jobs: a request file (YAML or JSON, `-` for stdin), then the flags on top.

Every problem with the file (missing, unreadable, not UTF-8, malformed, a YAML tag such as
`!!python/object`, not a mapping) is a ValueError of one line, which `nbl` prints as
`nbl: error: ...` with exit 2: never a traceback. YAML is read with safe_load, so a tag never
constructs an object.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from cli.gates import add_to_request


MAX_FILE_BYTES = 1 << 20  # a job request is a few hundred bytes; this bounds `/dev/zero` or a wrong file


def _read(path: Path) -> str:
    """At most MAX_FILE_BYTES of the file (or stdin), as UTF-8 text; more is an error, not a hang."""
    if str(path) == "-":
        stream = getattr(sys.stdin, "buffer", None)
        data = stream.read(MAX_FILE_BYTES + 1) if stream else sys.stdin.read(MAX_FILE_BYTES + 1).encode()
    else:
        with open(path, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"{path}: over {MAX_FILE_BYTES} bytes; a job request is a small YAML or JSON mapping")
    return data.decode("utf-8")


def load_request_file(path: Path) -> dict[str, Any]:
    """`-` is stdin, read as YAML (which JSON is a part of)."""
    try:
        text = _read(path)
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read it: {e.strerror or e}") from None
    if path.suffix.lower() == ".json":
        try:
            loaded = json.loads(text)
        except ValueError as e:
            raise ValueError(f"{path}: not valid JSON: {e}") from None
    else:
        loaded = _load_yaml(path, text)
    if not isinstance(loaded, dict):
        raise ValueError(f"{path}: expected a mapping (the job request body), got {type(loaded).__name__}")
    return loaded


def _load_yaml(path: Path, text: str) -> Any:
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e)
        raise ValueError(f"{path}: not valid YAML or JSON: {' '.join(problem.split())}{where}") from None


def build_request(args) -> dict[str, Any]:
    """The request body: the file (if any), then each flag given on top of it."""
    body: dict[str, Any] = load_request_file(args.file) if args.file else {}

    def put(section: str, key: str, value) -> None:
        if value is not None:
            body.setdefault(section, {})
            if not isinstance(body[section], dict):
                raise ValueError(f"{section} must be a mapping")
            body[section][key] = value

    put("model", "id", args.model)
    put("model", "revision", args.revision)
    put("calibration", "dataset", args.dataset)
    put("calibration", "config", args.dataset_config)
    put("calibration", "split", args.split)
    put("calibration", "text_field", args.text_field)
    put("calibration", "num_samples", args.num_samples)
    put("calibration", "seq_len", args.seq_len)
    put("calibration", "seed", args.seed)
    put("calibration", "shuffle", args.shuffle)
    put("compression", "mode", args.mode)
    put("compression", "method", args.method)
    put("compression", "criterion", args.criterion)
    if getattr(args, "max_ppl_increase", None) is not None:
        put("compression", "budget", {"max_ppl_increase": args.max_ppl_increase})
    put("selection", "dataset", getattr(args, "selection_dataset", None))
    put("selection", "split", getattr(args, "selection_split", None))
    put("selection", "num_samples", getattr(args, "selection_samples", None))
    if args.k is not None and args.k.strip() == "auto":
        put("compression", "k", "auto")
    elif args.k is not None:
        try:
            ks = [int(x) for x in args.k.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"--k must be an integer or a comma-separated list, got {args.k!r}") from None
        put("compression", "k", ks[0] if len(ks) == 1 else ks)
    if args.perplexity is not None:
        put("evaluation", "perplexity", [] if args.perplexity == "none" else _names(args.perplexity))
    if args.tasks is not None:
        put("evaluation", "tasks", _names(args.tasks))
    put("evaluation", "limit", args.limit)
    put("evaluation", "max_tokens", args.max_tokens)
    put("evaluation", "speed", args.speed)
    if args.task_file:  # added to the file's: the server checks every line at submit (a 422 names it)
        files = [{"name": Path(f).stem, "jsonl": _read_task_file(Path(f))} for f in args.task_file]
        ev = body.get("evaluation")
        put("evaluation", "task_files", [*(ev.get("task_files") or [] if isinstance(ev, dict) else []), *files])
    add_to_request(body, getattr(args, "gate", None) or [])
    if args.publish_repo and args.local_dir:
        raise ValueError("give --publish-repo or --local-dir, not both")
    if args.publish_repo:
        body["publish"] = {"repo_id": args.publish_repo}
        put("publish", "private", None if args.public is None else not args.public)
        put("publish", "revision", args.publish_revision)
        put("publish", "create_pr", args.create_pr)
    elif args.local_dir:
        body["publish"] = {"local_dir": args.local_dir}
    for item in args.metadata:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--metadata takes KEY=VALUE, got {item!r}")
        put("metadata", key, value)
    if args.webhook_url is not None:
        body["webhook_url"] = args.webhook_url
    if "model" not in body:
        raise ValueError("give --model or a request file")
    return body


def _read_task_file(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read it: {e.strerror or e}") from None


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]
