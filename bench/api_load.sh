#!/usr/bin/env bash
# Load figure for the job API: GET /v1/jobs/{id} requests/s on loopback, Postgres + Redis.
#
#   bash bench/api_load.sh [seconds=20] [connections=16]
#
# Starts `nbl serve` (one uvicorn process) against a throwaway Postgres database, creates a key and
# one job, then runs wrk. Writes bench/results/api_load.txt. Needs wrk (Debian package `wrk`).
set -euo pipefail
cd "$(dirname "$0")/.."
DUR="${1:-20}"; CONN="${2:-16}"; PORT="${NBL_LOAD_PORT:-8799}"
DB="nbl_load_$$"
export NBL_HOME="$(mktemp -d)"
export DATABASE_URL="postgresql+psycopg://postgres@127.0.0.1:5432/$DB"
export BROKER_URL="redis://127.0.0.1:6379/14"
export NBL_QUEUE="nbl-load-$$"
export NBL_API_URL="http://127.0.0.1:$PORT"
psql -h 127.0.0.1 -U postgres -d test -qc "CREATE DATABASE $DB" >/dev/null
cleanup() {
  kill "${API:-}" 2>/dev/null || true; wait "${API:-}" 2>/dev/null || true
  psql -h 127.0.0.1 -U postgres -d test -qc "DROP DATABASE IF EXISTS $DB" >/dev/null || true
  redis-cli -n 14 del "$NBL_QUEUE" >/dev/null || true
  rm -rf "$NBL_HOME"
}
trap cleanup EXIT

export NBL_API_KEY="$(.venv/bin/nbl admin create-key --team load --create-team | tail -n 1)"
.venv/bin/nbl serve --port "$PORT" --log-level warning >"$NBL_HOME/api.log" 2>&1 &
API=$!
for _ in $(seq 60); do curl -sf "$NBL_API_URL/readyz" >/dev/null && break; sleep 0.5; done
JOB=$(.venv/bin/nbl submit --model HuggingFaceTB/SmolLM2-135M-Instruct --k 4 --json \
      | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["id"])')
curl -sf -H "Authorization: Bearer $NBL_API_KEY" "$NBL_API_URL/v1/jobs/$JOB" >/dev/null
mkdir -p bench/results
{
  echo "GET /v1/jobs/{id}, Postgres 15 + Redis on loopback, one uvicorn process, $(nproc) CPUs"
  echo "command: bash bench/api_load.sh $DUR $CONN   ($(date -u +%FT%TZ), load average: $(cut -d' ' -f1-3 /proc/loadavg))"
  wrk -t2 -c"$CONN" -d"${DUR}s" --latency -H "Authorization: Bearer $NBL_API_KEY" "$NBL_API_URL/v1/jobs/$JOB"
} | tee bench/results/api_load.txt
