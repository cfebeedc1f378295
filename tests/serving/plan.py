"""What the vLLM tests run, shared by both sides (stdlib only: imported in both venvs)."""

NEW_TOKENS = 16
LOGPROB_TOL = 1e-3
KV_CACHE_GIB = 1  # VLLM_CPU_KVCACHE_SPACE

# name -> (model, mode, method, k, criterion). The SmolLM2 ones share one small calibration (8 x 128
# tokens of C4, through the statistics cache); on it NMSE ranks layer 0 first for attn, then the last
# layers among others, and CCA ranks the last layers first: layer 0 alone, layer 0 with the last
# layer, and the last layers of a block run are all covered (a test checks it).
OUTPUTS = {
    "smollm2-base": ("smollm2", None, None, 0, None),
    "smollm2-attn-nbl-layer0": ("smollm2", "attn", "nbl", 1, "nmse"),
    "smollm2-attn-nbl-k4": ("smollm2", "attn", "nbl", 4, "nmse"),
    "smollm2-block-nbl-k2": ("smollm2", "block", "nbl", 2, "cca"),
    "smollm2-attn-drop-k4": ("smollm2", "attn", "drop", 4, "cca"),
    "tiny-mistral-attn-nbl-k2": ("mistral", "attn", "nbl", 2, "cca"),
    "tiny-qwen2-block-nbl-k1": ("qwen2", "block", "nbl", 1, "cca"),
    "tiny-qwen3-block-drop-k1": ("qwen3", "block", "drop", 1, "cca"),
}
SERVED = "smollm2-attn-nbl-layer0"  # the output `vllm serve` is tested on


def kv_cache_tokens(attention_layers: int, bytes_per_token_layer: int, block_size: int) -> int:
    """Tokens a KV cache of KV_CACHE_GIB holds when `attention_layers` layers keep K and V."""
    per_block = attention_layers * bytes_per_token_layer * block_size
    return (KV_CACHE_GIB << 30) // per_block * block_size


# The nbl outputs of each family's tiny model (families_prepare.py, test_vllm_families.py): mode -> k, method nbl
FAMILY_MODES = {"attn": 2, "block": 1}
# families whose nbl outputs OUTPUTS above already runs (SmolLM2 is a Llama)
OUTPUT_FAMILIES = ("llama", "mistral", "qwen2", "qwen3")


def plugin_families() -> list[str]:
    """The families the plugin builds: its table (integrations/vllm/nbl_vllm/configs.py FAMILIES), read from its
    source, so that this file imports neither the plugin nor vLLM."""
    import ast
    from pathlib import Path

    source = Path(__file__).resolve().parents[2] / "integrations" / "vllm" / "nbl_vllm" / "configs.py"
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "FAMILIES":
            return list(ast.literal_eval(node.value))
    raise LookupError(f"no FAMILIES table in {source}")
