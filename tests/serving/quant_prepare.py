"""Run by the project's python (the serving venv has no worker): a tiny Llama, its transformers greedy tokens, and
the same model quantized w8a8 and w4a16 by worker/quant/quantize.py (llm-compressor in .venv-quant), for
test_vllm_quantized.py. Writes WORK/quant_reference.json {name: {"path", "prompts", "tokens"}}.

    python tests/serving/quant_prepare.py WORK
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent)]

from testkit.models import save_tiny_checkpoint  # noqa: E402

from worker.quant.quantize import quantize  # noqa: E402

PROMPTS = [[5, 17, 33, 8], [40, 41, 42, 43, 44], [90, 12]]


def main(work: Path) -> None:
    base = save_tiny_checkpoint(work / "base", hidden_size=128, intermediate_size=256, layers=2)
    blocks = [[(7 * i + j) % 90 + 3 for j in range(32)] for i in range(8)]
    ref = {}
    for scheme in ("w8a8", "w4a16"):
        facts = quantize(base, work / scheme, scheme, blocks, timeout_s=900)
        ref[scheme] = {"path": facts["path"], "prompts": PROMPTS, "group_size": facts["group_size"]}
    (work / "quant_reference.json").write_text(json.dumps(ref))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
