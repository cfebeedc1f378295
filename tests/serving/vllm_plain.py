"""One output through vLLM in its own process: prints JSON {"tokens", "logprobs"} of 16 greedy fp32 tokens per
prompt, as vllm_run.py measures them, and its KV cache: "block_size", "kv_cache_tokens" and "kv_cache_layers" (the
attention layers vLLM laid it out for). With VLLM_PLUGINS= no plugin is loaded (the form outputs); without, vLLM
loads ours by its entry point (the families' nbl outputs).

    [VLLM_PLUGINS=] [NBL_VLLM_DTYPE=bfloat16] python tests/serving/vllm_plain.py PATH TRUST_REMOTE_CODE(0|1) PROMPTS_JSON
"""

from __future__ import annotations

import json
import os
import sys

from plan import NEW_TOKENS


def main(path: str, trust: bool, prompts: list[list[int]]) -> None:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(
        model=path,
        dtype=os.environ.get("NBL_VLLM_DTYPE", "float32"),  # a quantized output's kernels may want bfloat16
        generation_config="vllm",
        max_model_len=256,
        seed=0,
        enforce_eager=True,
        distributed_executor_backend="uni",
        trust_remote_code=trust,
    )
    params = SamplingParams(temperature=0.0, max_tokens=NEW_TOKENS, ignore_eos=True, logprobs=1)
    outs = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts], params, use_tqdm=False)
    cache = llm.llm_engine.vllm_config.cache_config
    # in this process (no engine process): the layers the KV cache was laid out for
    groups = llm.llm_engine.engine_core.engine_core.scheduler.kv_cache_config.kv_cache_groups
    print(
        "RESULT "
        + json.dumps(
            {
                "tokens": [list(o.outputs[0].token_ids) for o in outs],
                "logprobs": [
                    [s[t].logprob for t, s in zip(o.outputs[0].token_ids, o.outputs[0].logprobs)] for o in outs
                ],
                "block_size": cache.block_size,
                "kv_cache_tokens": cache.num_gpu_blocks * cache.block_size,
                "kv_cache_layers": sorted(name for g in groups for name in g.layer_names),
            }
        )
    )
    llm.llm_engine.engine_core.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] == "1", json.loads(sys.argv[3]))
