"""nbl_vllm: serve Neural Block Linearization outputs (arXiv 2505.21077) with vLLM.

A compressed output is its base family's model with some decoder layers rewired, as recorded in
config.json `nbl = {mode, method, layers}` under `model_type: nbl_<family>`. vLLM loads a plugin's
entry point (group `vllm.general_plugins`) in every process it starts, the engine's child included;
`register()` makes both halves of such a directory known there:

- the config class of `nbl_<family>` to transformers' AutoConfig, so the directory's config.json
  parses without running its modeling_nbl.py (no trust_remote_code);
- the architecture `NBL<Family>ForCausalLM` to vLLM's ModelRegistry, lazily (module:class), so the
  model code is imported only by the process that builds the model.

Install: `pip install vllm==<pinned> ./integrations/vllm` (GPU) or `make serving-env` (CPU).
"""

from .configs import ARCHITECTURES, register_configs


def register() -> None:
    """The `vllm.general_plugins` entry point; idempotent (vLLM may call it more than once)."""
    from vllm import ModelRegistry

    register_configs()
    for family, arch in ARCHITECTURES.items():
        if arch not in ModelRegistry.get_supported_archs():
            ModelRegistry.register_model(arch, f"nbl_vllm.models:{arch}")
