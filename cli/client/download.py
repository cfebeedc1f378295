"""`nbl download JOB [--k K] DIR`: a job's local output, file by file, through nbl_client's
Client.download: each file checked against the sha256 the API lists and renamed into place whole;
run it again after an interruption and it resumes the partial file (HTTP Range) and skips the
files already there. The server's listing is checked whole first, and nothing is written through a
symlink (nbl_client.download); each refusal is one line and an exit code of EXIT_CODES.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from cli.client.wait import EXIT_API, EXIT_TIMEOUT
from nbl_client import ApiError, ChecksumMismatch, Client, NoOutput, Unavailable, UnsafePath

EXIT_CHECKSUM = 1
EXIT_USAGE = 2
EXIT_CODES = f"""exit codes (nbl download):
  0  every file is in DIR, whole, with the listed sha256
  {EXIT_CHECKSUM}  a file's sha256 (or size) differs from the listed one (corrupted on the server or on the
     way); its partial file was removed, the others kept: run again to fetch it anew
  {EXIT_USAGE}  a usage error: a bad flag or API URL, DIR is a file, the job has several outputs and no
     --k was given; or DIR cannot take the files: a listed path that is not a plain relative path
     (it would leave DIR, is absolute, holds `..`, a backslash or a control character, a name over
     255 bytes), a listing that names a path twice or as both a file and a folder, a symlink or a
     file where a folder goes, a folder where a file goes, a folder that cannot be written. Nothing
     is written through a symlink
  {EXIT_TIMEOUT}  the API was unreachable for --connect-timeout seconds in a row, busy (429, 502, 503,
     504) at --timeout, or the connection was lost mid-file: run again to resume
  {EXIT_API}  the API refused or has nothing to download: an unknown job (or another team's), a job with
     no published output (yet), no published output k, an output published to the Hub (the Hub
     URL is printed: download it from there), a bad key, or no key"""


def add_download(sub, parser, client_args, run) -> None:
    """Registered by cli/client/commands.py with its helpers (parser with the epilog, common flags, client setup)."""
    p = parser(
        sub,
        "download",
        "download a job's local output and check its sha256s",
        "Fetch every file of the job's local output k into DIR (created): each file is checked against "
        "the sha256 the API lists and renamed into place whole. Run it again after an interruption: "
        "partial files are resumed, checked files skipped. A Hub output is not served: its URL is printed.",
    )
    p.epilog = EXIT_CODES
    p.add_argument("job", help="job id")
    p.add_argument("dir", type=Path, help="target folder")
    p.add_argument("--k", type=int, default=None, help="which output (default: the job's only one)")
    client_args(p, timeout=True)
    p.set_defaults(func=run(download))


def download(client: Client, args) -> int:
    if args.dir.exists() and not args.dir.is_dir():
        print(f"nbl: {args.dir} is not a folder", file=sys.stderr)
        return EXIT_USAGE
    say = None if args.json else (lambda f: print(f"{f.status:<10} {f.size:>14,}  {f.path}", file=sys.stderr))
    try:
        k = client.output_k(args.job, args.k, timeout=args.timeout or None)
        done = client.download(args.job, k, args.dir, timeout=args.timeout or None, on_file=say)
    except ChecksumMismatch as e:
        return _fail(EXIT_CHECKSUM, e)
    except NoOutput as e:  # nothing to download, as "no published output k" is: the table's 4
        return _fail(EXIT_API, e)
    except (UnsafePath, ValueError) as e:
        return _fail(EXIT_USAGE, e)
    except OSError as e:  # DIR itself: not writable, full, ...
        return _fail(
            EXIT_USAGE, f"cannot write into {args.dir}: {e.strerror or e}" + (f" ({e.filename})" if e.filename else "")
        )
    except Unavailable as e:
        return _fail(EXIT_TIMEOUT, e)
    except ApiError as e:
        if e.problem.get("hub_url"):
            print(e.problem["hub_url"])  # stdout: where to fetch it from
        return _fail(EXIT_API, e)
    total = sum(f.size for f in done)
    if args.json:
        print(
            json.dumps(
                {"job_id": args.job, "k": k, "dir": str(args.dir), "bytes": total, "files": [vars(f) for f in done]},
                indent=2,
            )
        )
    else:
        print(f"k={k}: {len(done)} files, {total:,} bytes in {args.dir}, sha256 checked")
    return 0


def _fail(code: int, error: Exception | str) -> int:
    print(f"nbl: {error}", file=sys.stderr)
    return code
