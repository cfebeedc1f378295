"""Run by the project's python (the serving venv has no worker): a tiny Llama quantized w8a8 and w4a16 by
worker/quant/quantize.py (llm-compressor in .venv-quant), and its fold attn output (a DeciLM, attention no_op in the
replaced layer) quantized the same way, for test_vllm_quantized.py. Writes WORK/quant_reference.json
{name: {"path", "prompts", "group_size"}}, names w8a8, w4a16, deci-w8a8, deci-w4a16.

    python tests/serving/quant_prepare.py WORK
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent)]

from testkit.models import DATA_DIR, save_tiny_checkpoint  # noqa: E402

from cli.main import main as nbl  # noqa: E402
from worker.quant.quantize import quantize  # noqa: E402

PROMPTS = [[5, 17, 33, 8], [40, 41, 42, 43, 44], [90, 12]]


def main(work: Path) -> None:
    base = save_tiny_checkpoint(work / "base", hidden_size=128, intermediate_size=256, layers=2)
    blocks = [[(7 * i + j) % 90 + 3 for j in range(32)] for i in range(8)]
    docs = json.loads((DATA_DIR / "c4" / "c4_demo.json").read_text())[:40]
    (work / "calib.jsonl").write_text("".join(json.dumps({"text": d["text"]}) + "\n" for d in docs))
    deci = work / "fold-attn"
    flags = ["--mode", "attn", "--form", "fold", "--k", "1", "--num-samples", "8", "--seq-len", "32", "--no-load-check"]
    assert (
        nbl(["compress", "--model", str(base), "--dataset", str(work / "calib.jsonl"), *flags, "--out", str(deci)]) == 0
    )
    ref = {}
    for name, model in (("", base), ("deci-", deci)):
        for scheme in ("w8a8", "w4a16"):
            facts = quantize(model, work / f"{name}{scheme}", scheme, blocks, timeout_s=900)
            ref[f"{name}{scheme}"] = {"path": facts["path"], "prompts": PROMPTS, "group_size": facts["group_size"]}
    (work / "quant_reference.json").write_text(json.dumps(ref))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
