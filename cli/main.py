"""`nbl`, the entry point: one parser, each group of commands registered from its own module.

Nothing heavy is imported here or at the top of the command modules (torch and the worker package load
inside the command that needs them), so `nbl --help` is instant.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from cli.admin import add_admin_commands, add_reconcile
from cli.client.commands import add_client_commands
from cli.compress import add_compress
from cli.estimate import add_estimate
from cli.eval import add_eval
from cli.export import add_export
from cli.keys import add_key_commands
from cli.outputs import add_output_commands
from cli.serve import add_serve
from cli.worker import add_import_gguf, add_worker


class Parser(argparse.ArgumentParser):
    """A usage error is one line and a hint, not the command's whole usage block (its subcommands inherit it)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n  (`{self.prog} --help` lists every option)\n")


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="nbl", description="nbl-service: Neural Block Linearization for LLMs")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    add_compress(sub)
    add_eval(sub)
    add_estimate(sub)
    add_import_gguf(sub)
    add_export(sub)
    add_worker(sub)
    admin = sub.add_parser("admin", help="administer the service: API keys, migrations, the reconciler")
    asub = admin.add_subparsers(dest="admin_command", required=True)
    add_key_commands(asub)
    add_admin_commands(asub)
    add_output_commands(asub)
    add_reconcile(sub)
    add_serve(sub)
    add_client_commands(sub)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        code = args.func(args)
        sys.stdout.flush()  # here, not at exit, so a closed pipe is caught below
        return code
    except ValueError as e:  # user errors: bad input, refused model, too little data
        print(f"nbl: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # The reader went away (`nbl admin list-keys | head -1`): stop quietly, as a Unix filter does.
        # Python's advice (library/signal.html, "Note on SIGPIPE"): point stdout at devnull so the
        # flush at exit does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
