"""The body of `nbl submit`'s POST /v1/jobs: a request file (YAML or JSON, `-` for stdin), then the flags on top.

The files (the request file, each --task-file) are read by cli/client/request_file.py: bounded in size and
depth, YAML aliases and tags refused; every problem is a ValueError of one line, which `nbl` prints
as `nbl: error: ...` with exit 2: never a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cli.client.request_file import MAX_TASK_FILE_BYTES, load_mapping, read_text
from cli.gates import add_to_request
from cli.refine_options import heal_request


def load_request_file(path: Path) -> dict[str, Any]:
    """`-` is stdin; `.json` is JSON, anything else YAML (which JSON is a part of)."""
    return load_mapping(path)


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
    put("compression", "form", getattr(args, "form", None))
    if getattr(args, "max_ppl_increase", None) is not None:
        put(
            "compression",
            "budget",
            {
                "max_ppl_increase": args.max_ppl_increase,
                **({} if getattr(args, "enforce_budget", True) else {"enforce": False}),
            },
        )
    put("compression", "refit", getattr(args, "refit", None))
    if hasattr(args, "heal_tokens"):
        put("compression", "heal", heal_request(args))
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
    if getattr(args, "quantize", None):
        if not isinstance(body.get("publish"), dict):
            raise ValueError("--quantize publishes quantized copies: give --local-dir or --publish-repo too")
        put("publish", "quantize", list(args.quantize))
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
    text = read_text(path, MAX_TASK_FILE_BYTES, "a task file is sent in the request (the API bounds its size too)")
    return text.replace("\r\n", "\n").replace("\r", "\n")  # universal newlines, as reading it as text did


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]
