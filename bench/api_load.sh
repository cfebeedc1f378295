#!/usr/bin/env bash
# Load figures for the job API on loopback, Postgres + Redis: /healthz, GET /v1/jobs/{id} and
# GET /v1/jobs?limit=20 in the same run, and their ratios to /healthz.
#
#   bash bench/api_load.sh [seconds=10] [connections=16] [rounds=3]
#
# Starts `nbl serve` (one uvicorn process) against a throwaway Postgres database, creates a key and
# 25 finished jobs (bench/api_load_seed.py: scores, metrics, warnings, artifacts), then runs wrk on
# each route in turn, `rounds` times, so that all three share the machine's load. Writes
# bench/results/api_load.md. Needs wrk (Debian package `wrk`).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD:$PWD/clients/python${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's code, whichever checkout the venv was installed from
DUR="${1:-10}"; CONN="${2:-16}"; ROUNDS="${3:-3}"; PORT="${NBL_LOAD_PORT:-8799}"
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
JOB=$(.venv/bin/python bench/api_load_seed.py "$NBL_API_KEY" 25 | tail -n 1)
.venv/bin/nbl serve --port "$PORT" --log-level warning >"$NBL_HOME/api.log" 2>&1 &
API=$!
for _ in $(seq 60); do curl -sf "$NBL_API_URL/readyz" >/dev/null && break; sleep 0.5; done
AUTH="Authorization: Bearer $NBL_API_KEY"
declare -A URL=([healthz]="/healthz" [job]="/v1/jobs/$JOB" [list]="/v1/jobs?limit=20")
for name in healthz job list; do curl -sf -H "$AUTH" "$NBL_API_URL${URL[$name]}" >/dev/null; done  # warm, and fail early

rate() {  # requests/s of one wrk run on $1
  wrk -t1 -c"$CONN" -d"${DUR}s" -H "$AUTH" "$NBL_API_URL$1" | awk '/^Requests\/sec:/ {print $2}'
}
mkdir -p bench/results
OUT=bench/results/api_load.md
{
  echo "# API load: requests/s on loopback"
  echo
  echo "Postgres + Redis on loopback, one uvicorn process, $(nproc) CPUs shared with wrk (1 thread, $CONN connections),"
  echo "${DUR} s per route per round; the job read is a finished job with scores, metrics, warnings and artifacts,"
  echo "the list 20 such jobs. Ratios are to /healthz in the same round."
  echo
  echo "command: \`bash bench/api_load.sh $DUR $CONN $ROUNDS\` ($(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo "?"),"
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg))"
  echo
  echo "| round | /healthz | GET /v1/jobs/{id} | GET /v1/jobs?limit=20 | job / healthz | list / healthz |"
  echo "|---|---|---|---|---|---|"
} >"$OUT"
for r in $(seq "$ROUNDS"); do
  h=$(rate "${URL[healthz]}"); j=$(rate "${URL[job]}"); l=$(rate "${URL[list]}")
  row=$(awk -v r="$r" -v h="$h" -v j="$j" -v l="$l" \
        'BEGIN {printf "| %d | %.0f | %.0f | %.0f | %.2f | %.2f |", r, h, j, l, j / h, l / h}')
  echo "$row" | tee -a "$OUT"
done
echo >>"$OUT"
echo "targets: job / healthz >= 0.25, list / healthz >= 0.20 (issue 28)" >>"$OUT"
cat "$OUT"
