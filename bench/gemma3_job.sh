#!/usr/bin/env bash
# Gemma 3 270M through the real service: import, key, API + worker (embedded SQLite), a job attn k=4, wait.
# Writes its state and logs under /tmp/gjob; bench/results/gemma3_job.md is made from wait.out, wait.err, job.json.
set -euo pipefail
cd "$(dirname "$0")/.."
source .venv/bin/activate
export NBL_DATA_DIR=${NBL_DATA_DIR:-$PWD/../shared/data} NBL_HOME=/tmp/gjob/home NBL_API_URL=http://127.0.0.1:8765
REPO=$PWD
mkdir -p /tmp/gjob && cd /tmp/gjob
GGUF=$(PYTHONPATH="$REPO/tests" python -c 'from testkit.models import gemma3_gguf; print(gemma3_gguf())')
/usr/bin/time -v nbl import-gguf "$GGUF" --name gemma3-270m 2> import.time
export NBL_API_KEY=$(nbl admin create-key --team bench --create-team | tail -n 1)
nbl serve --port 8765 > serve.log 2>&1 &
SERVE=$!
nbl worker > worker.log 2>&1 &
WORKER=$!
trap 'kill $SERVE $WORKER 2>/dev/null || true' EXIT
JOB=$(nbl submit --model local:gemma3-270m --num-samples 32 --seq-len 256 --k 4 --mode attn \
        --perplexity wikitext2 --max-tokens 4094 --json | python -c 'import json, sys; print(json.load(sys.stdin)["id"])')
echo "job $JOB"
start=$(date +%s)
nbl wait $JOB --timeout 3600 > wait.out 2> wait.err; echo "exit $?" >> wait.out
echo "wall $(( $(date +%s) - start )) s" >> wait.out
nbl wait $JOB --json --quiet > job.json || true
