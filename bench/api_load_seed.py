"""Seed the load benchmark's database: N finished jobs of the key's team, written through the real
store functions (tests/testkit/ui_seed.py: scores, selection, metrics, warnings, artifacts, events), so a read
pays for a job's whole result. Prints the id of the newest job.

    python bench/api_load_seed.py KEY [N=25]          # DATABASE_URL etc. from the environment
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from service.core.db import make_engine, make_sessionmaker  # noqa: E402
from service.core.settings import Settings  # noqa: E402
from tests.testkit.ui_seed import seed_job  # noqa: E402


def main() -> None:
    key, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25
    settings = Settings()
    sessions = make_sessionmaker(make_engine(settings))
    job_id = ""
    for i in range(n):
        job_id = seed_job(sessions, settings, key, metadata={"pipeline": f"load-{i}"})
    print(job_id)


if __name__ == "__main__":
    main()
