"""A full disk while publishing locally: one line, classed `system` (worker/errors.py), naming the output and
no server path.

copytree gathers each file's failure into one shutil.Error whose text is the list of (source, destination,
reason) tuples, server paths and all, and on a full disk it goes on to fail every later file the same way. So
the copy function raises NoSpace at the first ENOSPC or EDQUOT, which copytree lets through (it is not an
OSError), and the publish words it for the job:

    no space left on device while publishing local_dir 'name' (k=2)
"""

from __future__ import annotations

import contextlib
import errno
import os

from ..errors import NoSpace

FULL = (errno.ENOSPC, errno.EDQUOT)


def full(e: BaseException) -> bool:
    return isinstance(e, OSError) and e.errno in FULL


@contextlib.contextmanager
def worded(what: str):
    """Inside: a full disk (NoSpace from the copy function, or an OSError of its own) becomes NoSpace naming
    `what`; any other failure is left as it came."""
    try:
        yield
    except NoSpace as e:
        raise NoSpace(f"{e} while publishing {what}") from e.__cause__
    except OSError as e:
        if not full(e):
            raise
        raise NoSpace(f"{os.strerror(e.errno).lower()} while publishing {what}") from e
