"""What one family's entry says (nbl/families.py holds the table): its classes, its layer's branches, what form fold
and DeciLM make of it, the runtimes that run it, and what llama.cpp makes of it. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass

from nbl.layer_layout import Layout

ATTN = ("input_layernorm", "self_attn")  # the attention branch of a Llama-shaped layer
# The checkpoint tensors whose output is a layer's MLP branch (a pattern after `model.layers.{j}.`, and the dimension
# that indexes the hidden size): form fold multiplies each by (I + T) there. A mixture of experts sums its experts'
# outputs weighted by the router (and Qwen2-MoE's gated shared expert), so (I + T) applied to every expert's
# down projection is (I + T) applied to the sum: exact, and the router is untouched.
DOWN = ((r"mlp\.down_proj\.weight", 0), (r"mlp\.down_proj\.bias", 0))


@dataclass(frozen=True)
class Key:
    """A value in a family's `gguf_fixed` that is another key's in the same config (its value, or its default)."""

    name: str


@dataclass(frozen=True)
class Family:
    config: str  # the config class in transformers
    model: str  # its causal LM class
    attn: tuple[str, ...] = ATTN  # the attention branch's modules, input to output
    ln2: str = "post_attention_layernorm"  # the norm in front of the MLP branch
    decilm: str | None = None  # None: DeciLM (forms linear, fold attn) can express it; else why not
    fold: str | None = None  # None: form fold writes its blocks; else why not
    window: int | None = None  # the sliding window its config class fills in when config.json leaves it out
    plugin: bool = False  # the nbl_vllm plugin (integrations/vllm) builds its layers: the nbl form runs in vLLM
    # the runtimes besides transformers that run the family's own class (a fold block output), read from their code
    # and listed only where a test of ours or the runtime's model registry says so
    plain: tuple[str, ...] = ()
    # those of `plain` our tests do not load token-exact (the card says "per the runtime's code" for them)
    untested: tuple[str, ...] = ()
    # the architecture llama.cpp's converter (convert_hf_to_gguf.py) writes for the family's own class, which
    # `nbl export --format gguf` writes a plain checkpoint as; None with `no_gguf` saying why it cannot
    gguf: str | None = None
    no_gguf: str | None = None
    # config values llama.cpp's graph for that architecture assumes rather than reads: (key, the value it assumes,
    # transformers' default when config.json leaves the key out, where in llama.cpp), a value Key(k) being key k's
    # in the same config; export refuses any other
    gguf_fixed: tuple[tuple[str, object, object, str], ...] = ()
    # Gemma: llama.cpp derives the sliding/global pattern from the position, every gguf_swa-th layer global, and
    # the attention scale from the layer count: (the count it reads as the 27B, transformers' query_pre_attn_scalar
    # default); export refuses a checkpoint that differs (nbl/outputs/gguf_assumed.py)
    gguf_swa: int | None = None
    gguf_scale: tuple[int, int] | None = None
    down: tuple[tuple[str, int], ...] = DOWN  # the MLP branch's output projections in a checkpoint (form fold)
    # what its layer holds beyond Llama's (biases, q/k norms, sinks, Gemma's norms, experts): sizing counts it
    layout: Layout = Layout()

    @property
    def moe(self) -> bool:
        return self.layout.experts is not None
