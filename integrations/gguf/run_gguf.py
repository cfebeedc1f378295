"""Runs in the GGUF venv: a GGUF file read by llama.cpp (llama-cpp-python), for the tests and bench/gguf_ppl.py.

    python run_gguf.py generate FILE.gguf REQUEST.json   {"prompts": [[ids...]], "texts": [...], "new": N}
        -> {"tokens": [[N greedy ids]...], "ids": [[ids of each text, by the embedded tokenizer]...], "arch"}
    python run_gguf.py perplexity FILE.gguf IDS.json CTX  the ids scored in windows of CTX tokens, each
        window's second half scored, its first half as context, as llama-perplexity does (without its BOS)
        -> {"ppl", "tokens_scored", "windows"}

Greedy is the argmax of llama.cpp's logits, one token at a time (no sampler), so it compares with
transformers' greedy decoding token for token.
"""

from __future__ import annotations

import json
import math
import os
import sys

import numpy as np
from llama_cpp import Llama


def load(path: str, n_ctx: int) -> Llama:
    return Llama(
        model_path=path,
        n_ctx=n_ctx,
        n_batch=n_ctx,
        n_ubatch=n_ctx,
        logits_all=True,
        verbose=False,
        n_threads=os.cpu_count() or 1,
        seed=0,
    )


def generate(path: str, request: dict) -> dict:
    new = request["new"]
    llm = load(path, max([len(p) for p in request["prompts"]] + [8]) + new + 8)
    out = []
    for prompt in request["prompts"]:
        llm.reset()
        llm.eval(prompt)
        got = []
        for _ in range(new):
            got.append(int(np.argmax(llm.scores[llm.n_tokens - 1])))
            llm.eval([got[-1]])
        out.append(got)
    ids = [llm.tokenize(t.encode(), add_bos=False, special=False) for t in request.get("texts", [])]
    return {"tokens": out, "ids": ids, "arch": llm.metadata.get("general.architecture")}


def perplexity(path: str, ids: list[int], ctx: int) -> dict:
    llm = load(path, ctx)
    nll, scored, windows = 0.0, 0, 0
    for start in range(0, len(ids) - ctx + 1, ctx):
        window = ids[start : start + ctx]
        llm.reset()
        llm.eval(window)
        first = ctx // 2
        logits = llm.scores[first : ctx - 1].astype(np.float64)  # row i predicts token first + i + 1
        top = logits.max(axis=1)
        lse = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
        nll += float((lse - logits[np.arange(len(logits)), window[first + 1 : ctx]]).sum())
        scored += len(logits)
        windows += 1
    return {"ppl": math.exp(nll / scored), "tokens_scored": scored, "windows": windows}


if __name__ == "__main__":
    cmd, path = sys.argv[1], sys.argv[2]
    if cmd == "generate":
        print(json.dumps(generate(path, json.loads(open(sys.argv[3]).read()))))
    elif cmd == "perplexity":
        print(json.dumps(perplexity(path, json.loads(open(sys.argv[3]).read()), int(sys.argv[4]))))
    else:
        raise SystemExit(__doc__)
