"""Run outputs through vLLM's offline API in this process, one engine at a time (serving venv).

Eager and in this one process (VLLM_ENABLE_V1_MULTIPROCESSING=0, the "uni" executor): on 2 cores
graph capture costs minutes and each engine process start tens of seconds, per model. The path
through vLLM's own processes, and the plugin loaded there by its entry point, is the serve test's.

fp32, greedy, 16 tokens without stopping at EOS, the prompts as token ids (the reference's own
tokenisation), vLLM's sampling defaults rather than the model's generation_config (as transformers'
plain forward pass), and the log-probability of each chosen token (raw logits, as the reference).
"""

from __future__ import annotations

import gc
import os
import traceback

from plan import NEW_TOKENS


def run_one(path: str, prompts: list[list[int]]) -> dict:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(
        model=path,
        dtype="float32",
        generation_config="vllm",
        max_model_len=256,
        seed=0,
        enforce_eager=True,
        distributed_executor_backend="uni",
    )
    try:
        params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True, logprobs=1)
        outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
        tokens = [list(o.outputs[0].token_ids) for o in outs]
        logprobs = [[step[t].logprob for t, step in zip(o.outputs[0].token_ids, o.outputs[0].logprobs)] for o in outs]
        cache = llm.llm_engine.vllm_config.cache_config
        return {
            "tokens": tokens,
            "logprobs": logprobs,
            "block_size": cache.block_size,
            "kv_cache_tokens": cache.num_gpu_blocks * cache.block_size,
        }
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()


def run_all(reference: dict) -> dict:
    """name -> run_one's result, or {"error": traceback} so that one bad output fails only its tests."""
    results = {}
    for name, ref in reference.items():
        try:
            results[name] = run_one(ref["path"], ref["prompts"])
        except Exception:  # noqa: BLE001 - reported by that output's test
            results[name] = {"error": traceback.format_exc()}
    return results
