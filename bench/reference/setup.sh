#!/usr/bin/env bash
# Reproduce the authors' NBL reference environment (LIONS-EPFL/NBL) for bench/vs_reference.py.
#
#   bash bench/reference/setup.sh DIR
#
# Lays out, outside this repo:
#   DIR/NBL         the reference code, exported from the local bare mirror (no work tree there),
#                   with bench/reference/cpu_shims.patch applied (2 small, recorded loader shims)
#   DIR/venv        Python 3.11 venv: torch 2.13.0 (the CPU wheel on disk) + transformers 4.46.3
#                   and the rest pinned in bench/reference/requirements.lock
#   DIR/REF_COMMIT  the reference commit that was exported
#
# Environment: NBL_REF_MIRROR (default /work/.mirror/LIONS-EPFL+NBL/repo), PYTHON (default python3.11).
# Re-running refreshes DIR/NBL (the code copy) and keeps an existing DIR/venv.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "$here/../.." && pwd)"
[[ $# -eq 1 ]] || { echo "usage: $0 DIR" >&2; exit 2; }
dir="$(realpath -m "$1")"
case "$dir/" in "$repo_root"/*) echo "refusing: $dir is inside this repo; pick a directory outside it" >&2; exit 2;; esac
mkdir -p "$dir"

mirror="${NBL_REF_MIRROR:-/work/.mirror/LIONS-EPFL+NBL/repo}"
py="${PYTHON:-python3.11}"
[[ -d "$mirror" ]] || { echo "no reference mirror at $mirror (fetch github:LIONS-EPFL/NBL first, or set NBL_REF_MIRROR)" >&2; exit 1; }
git_ref=(git --git-dir="$mirror")

# 1. Code. The mirror may lack large blobs (it lacks src/llmtuner/data/c4_val.json, which this
#    benchmark does not use): export everything whose blob is present, name what is left out.
commit="$("${git_ref[@]}" rev-parse HEAD)"
excludes=()
while read -r _mode _type sha path; do
  if ! "${git_ref[@]}" cat-file -e "$sha" 2>/dev/null; then
    echo "note: blob of $path is absent from the mirror; not exported" >&2
    excludes+=(":(exclude)$path")
  fi
done < <("${git_ref[@]}" ls-tree -r HEAD)
rm -rf "$dir/NBL"
mkdir -p "$dir/NBL"
# (git archive still complains about the excluded absent blobs; that message is filtered out.)
"${git_ref[@]}" archive "$commit" -- . "${excludes[@]}" 2> >(grep -v "^error: invalid object" >&2) \
  | tar -x -C "$dir/NBL"
echo "$commit" > "$dir/REF_COMMIT"

# 2. Shims (minimal, recorded): see the comments inside the patch.
patch -p1 --forward --quiet -d "$dir/NBL" < "$here/cpu_shims.patch"
# The pipeline writes its per-layer activations, CCA statistics and W, b pickles here.
mkdir -p "$dir/NBL/llm_variables"

# 3. Environment. torch==2.13.0 resolves to the CPU wheel on disk (an unpinned torch would pull
#    gigabytes of CUDA); the rest is requirements.txt's transformers 4.46 stack, pinned.
if [[ ! -x "$dir/venv/bin/python" ]]; then
  "$py" -m venv "$dir/venv"
fi
"$dir/venv/bin/python" -m pip install -q --upgrade pip
"$dir/venv/bin/python" -m pip install -q -r "$here/requirements.lock"

"$dir/venv/bin/python" - <<'EOF'
import torch, transformers, datasets, trl, peft, scipy, accelerate
print(f"reference env ok: torch {torch.__version__}, transformers {transformers.__version__}, "
      f"datasets {datasets.__version__}, accelerate {accelerate.__version__}")
EOF
echo "reference commit $commit ready in $dir (code: $dir/NBL, venv: $dir/venv)"
