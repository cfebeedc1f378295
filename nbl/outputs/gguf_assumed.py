"""What llama.cpp assumes of a family rather than reads from its GGUF: a checkpoint that says otherwise is refused,
as its GGUF would compute another model than the one checked and evaluated. Torch-free; read from the pinned
llama.cpp (integrations/gguf/sdist.txt), src/models/<arch>.cpp and the converter's classes.

    gguf_fixed   config values its graph hard-codes (nbl/families.py): Qwen3-MoE normalizes the top-k router
                 weights, Qwen2-MoE and OLMoE do not; every Qwen-MoE layer has a router; OLMoE's q/k norms span
                 n_embd (as many k/v heads as queries)
    gguf_swa     Gemma's sliding/global pattern. The converter writes no per-layer pattern for Gemma 2/3
                 (conversion/gemma.py), so llama.cpp derives it from the position: load_swa_pattern(ml, n) reads
                 an array `sliding_window_pattern` when the GGUF has one, else llama_hparams::set_swa_pattern(n),
                 layer il sliding iff il % n < n - 1 (n = 2 for Gemma 2, 6 for Gemma 3). Transformers reads
                 config.layer_types. A Gemma with layers removed keeps its kept layers' types (worker/engine/forms/
                 kept_layers.py), which no longer fall every n-th: llama.cpp would slide the window on global layers
                 and use the local RoPE base there, and the other way round
    window       every other architecture exported runs no sliding window in llama.cpp (src/models/llama.cpp,
                 qwen2.cpp, qwen3.cpp, qwen2moe.cpp, qwen3moe.cpp, olmoe.cpp build full attention; phi3.cpp's
                 load_arch_hparams reads the window and sets LLAMA_SWA_TYPE_NONE, "Phi SWA is currently
                 disabled"), where transformers applies the config's window (Mistral 7B v0.1's 4,096, Phi-3-mini-4k's
                 2,047): a window shorter than the context is refused, as DeciLM refuses one (forms.py)
    gguf_scale   Gemma's attention scale: llama.cpp takes it from the model type, which it reads off the layer
                 count (load_arch_hparams: 46 layers Gemma 2 27B, 62 Gemma 3 27B, 1/sqrt(n_embd / n_head)),
                 1/sqrt(head_dim) for every other count; transformers uses query_pre_attn_scalar. Removing layers
                 from a 27B gives it the other scale
"""

from __future__ import annotations

from nbl.families import FAMILIES
from nbl.family_entry import Family, Key

SLIDING, FULL = "sliding_attention", "full_attention"


def resolved(value, config: dict):
    """A `gguf_fixed` value in this config: Key(k) is k's."""
    return config.get(value.name) if isinstance(value, Key) else value


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 64 else f"a {type(value).__name__}"  # user input: no megabyte repr


def swa_layers(n_layers: int, period: int) -> list[str]:
    """llama.cpp's derived pattern (llama_hparams::set_swa_pattern, not dense_first)."""
    return [SLIDING if il % period < period - 1 else FULL for il in range(n_layers)]


def layer_types(config: dict, period: int) -> list:
    """The layer types transformers runs a Gemma config with: its layer_types, else derived as its config class
    does (every sliding_window_pattern-th layer global, counting from 1)."""
    if "layer_types" in config:
        return config["layer_types"]
    every = config.get("sliding_window_pattern", period)
    n = config.get("num_hidden_layers")
    if not isinstance(every, int) or every < 1 or not isinstance(n, int):
        return []
    return [SLIDING if (i + 1) % every else FULL for i in range(n)]


def attention_scale_error(config: dict, entry: Family, where: str) -> str | None:
    layers_27b, default = entry.gguf_scale
    hidden, heads, head_dim = (config.get(k) for k in ("hidden_size", "num_attention_heads", "head_dim"))
    if not all(isinstance(v, int) and v > 0 for v in (hidden, heads, head_dim)):
        return None  # the converter and transformers refuse such a config themselves
    n = config.get("num_hidden_layers")
    theirs = hidden // heads if n == layers_27b else head_dim
    ours = config.get("query_pre_attn_scalar", default)
    if ours != theirs:
        return (
            f"{where} scales attention by query_pre_attn_scalar {_shown(ours)}, and llama.cpp's {entry.gguf} "
            f"by {theirs}, which it derives from the layer count (src/models/{entry.gguf}.cpp load_arch_hparams: "
            f"{layers_27b} layers are the 27B, 1/sqrt(n_embd / n_head), any other count 1/sqrt(head_dim))"
        )
    return None


def window_error(config: dict, entry: Family, where: str) -> str | None:
    """Why llama.cpp's full attention differs from the window transformers applies (None: it does not)."""
    window = config["sliding_window"] if "sliding_window" in config else entry.window
    context = config.get("max_position_embeddings")
    if not window or not config.get("use_sliding_window", True):
        return None
    if isinstance(window, int) and isinstance(context, int) and window >= context:
        return None  # the window never binds (Phi-3.5-mini's 262,144 over a 131,072 context)
    return (
        f"{where} has a sliding window of {_shown(window)} tokens, which transformers applies, and llama.cpp's "
        f"{entry.gguf} attends to the whole context (src/models/{entry.gguf}.cpp has no sliding window): its GGUF "
        "would compute another model past the window"
    )


def assumed_error(config: dict, where: str) -> None:
    """ValueError (one line) when the checkpoint sets what its family's llama.cpp architecture assumes otherwise."""
    family = config.get("model_type")
    entry = FAMILIES.get(family) if isinstance(family, str) else None
    if entry is None or not entry.gguf:
        return
    for key, assumed, default, source in entry.gguf_fixed:
        value, assumed = config.get(key, resolved(default, config)), resolved(assumed, config)
        if value != assumed:
            raise ValueError(
                f"{where} has {key} = {_shown(value)}, and llama.cpp's {entry.gguf} assumes {assumed!r} ({source}): "
                "its GGUF would compute another model"
            )
    if entry.gguf_swa:
        n = config.get("num_hidden_layers")
        ours = layer_types(config, entry.gguf_swa)
        theirs = swa_layers(n, entry.gguf_swa) if isinstance(n, int) and 0 < n <= 10_000 else None
        if ours != theirs:
            at = [i for i, t in enumerate(ours) if t == FULL] if isinstance(ours, list) else []
            there = [i for i, t in enumerate(theirs or ()) if t == FULL]
            raise ValueError(
                f"{where} has global attention at layers {_shown(at)} (layer_types), and llama.cpp's {entry.gguf} "
                f"derives it from the position, every {entry.gguf_swa}th layer: {_shown(there)} (load_swa_pattern "
                f"-> llama_hparams::set_swa_pattern({entry.gguf_swa})); a Gemma with removed layers has no GGUF"
            )
    if entry.gguf_scale and (why := attention_scale_error(config, entry, where)):
        raise ValueError(why)
    if not entry.gguf_swa and (why := window_error(config, entry, where)):
        raise ValueError(why)
