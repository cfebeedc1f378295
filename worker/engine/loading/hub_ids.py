"""A Hub id that is also a path in the working directory is ambiguous: refuse it.

`datasets.load_dataset("owner/name")` reads a local directory `owner/name` when one exists, and the
model loader reads an existing path as a local checkpoint; a Hub id from a job could then read files
that happen to sit in the worker's working directory. Refusing is the safe answer: the local reading
is always there to be spelt unambiguously (`./owner/name`, an absolute path).

Torch-free on purpose: the model and dataset resolvers of the worker share it.
"""

from __future__ import annotations

import os


def looks_like_hub_id(name: str) -> bool:
    """`name` or `owner/name`: what the Hub's grammar allows, not an explicit path (/..., ./..., ~...)."""
    return bool(name) and not name.startswith(("/", ".", "~")) and "\\" not in name and name.count("/") <= 1


def refuse_path_shadowing(name: str, what: str, error: type[ValueError] = ValueError) -> None:
    """Raise `error` when the Hub id `name` also exists as a path relative to the working directory."""
    if looks_like_hub_id(name) and os.path.lexists(name):
        raise error(
            f"{what} {name!r}: a path of that name exists in the worker's working directory; refusing to "
            f"guess whether the Hub id or that path is meant (write ./{name} for the path)"
        )
