"""A test-only Celery worker that dies right after its first publish reached the destination and
before the job row records it (issue 6, test 5). Fault injection lives here, not in production code:
DbSink.output (the recording step) is wrapped to os._exit on its first call, leaving a marker file
(NBL_TEST_CRASH_MARKER) holding the commit sha that was published.

    python tests/worker/publish/crash_after_publish.py worker --pool solo -Q QUEUE ...
"""

import os
import sys
from pathlib import Path

from worker import tasks

MARKER = Path(os.environ["NBL_TEST_CRASH_MARKER"])
_record = tasks.DbSink.output


def output(self, k, layers, published):
    if not MARKER.exists():
        MARKER.write_text(published.commit_sha or published.uri)
        os._exit(137)  # as abrupt as a SIGKILL: no finally blocks, no ack
    return _record(self, k, layers, published)


tasks.DbSink.output = output

if __name__ == "__main__":
    tasks.celery.worker_main(sys.argv[1:])
