"""`nbl`, the entry point: one parser, each group of commands registered from its own module.

Nothing heavy is imported here or at the top of the command modules (torch and the worker package load
inside the command that needs them), so `nbl --help` is instant.
"""

from __future__ import annotations

import argparse
import logging
import sys

from cli.admin import add_service_commands
from cli.compress import add_compress
from cli.eval import add_eval
from cli.worker import add_import_gguf, add_worker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nbl", description="nbl-service: Neural Block Linearization for LLMs")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    add_compress(sub)
    add_eval(sub)
    add_import_gguf(sub)
    add_worker(sub)
    add_service_commands(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except ValueError as e:  # user errors: bad input, refused model, too little data
        print(f"nbl: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
