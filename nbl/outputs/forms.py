"""The form an output is written in, and the runtimes that load it without our code.

    nbl     our modeling_nbl.py (trust_remote_code): attn h' = h + W h + b; block h'' = h + W h + b
    linear  DeciLM / Nemotron-NAS `block_configs`, `replace_with_linear`: attn h' = h + W·LN1(h);
            block: attention no_op and ffn replace_with_linear, h'' = h + W·LN2(h); no bias
    fold    the map acts on the previous block's MLP output and is folded into its down_proj:
            block: the base family's own class with fewer layers; attn: DeciLM with attention no_op

Torch-free: the API validates requests with it, the engine and the card read the same table. What
`runs_in` names for a runtime other than transformers is read from that runtime's code (vLLM's
nemotron_nas.py, llama.cpp's `deci` arch, TensorRT-LLM, SGLang, mlx-lm), not tested here unless
docs/serving.md says so.
"""

from __future__ import annotations

from nbl.families import FAMILIES

FORMS = ("nbl", "linear", "fold")
FORM = "nbl"
# fold and linear fit on the one-shot criteria only: the measured ones (loss probe, greedy, auto, k auto)
# replace layers with nbl's maps
ONE_SHOT = ("cca", "nmse", "cosine")
# the families DeciLM (Llama-shaped: RMSNorm, SwiGLU, no biases, no q/k norms) can express, and those whose blocks
# form fold writes: read from each family's entry (nbl/families.py)
DECILM_FAMILIES = tuple(f for f, entry in FAMILIES.items() if entry.decilm is None)
FOLD_BLOCK_FAMILIES = tuple(f for f, entry in FAMILIES.items() if entry.fold is None)
FFN_ROUND = 256  # DeciLM gives the MLP's width as ffn_mult, rounded up to a multiple of 256

# (form, mode) -> runtimes that load the output with no code of ours; "transformers+file": through the
# modeling file we ship (trust_remote_code); "vllm+plugin": with our nbl_vllm plugin installed
RUNS_IN: dict[tuple[str, str], tuple[str, ...]] = {
    ("nbl", "attn"): ("transformers+file", "vllm+plugin"),
    ("nbl", "block"): ("transformers+file", "vllm+plugin"),
    ("fold", "block"): ("transformers", "vllm", "sglang", "tensorrt-llm", "llama.cpp"),
    ("fold", "attn"): ("vllm", "sglang", "tensorrt-llm", "llama.cpp", "transformers+file"),
    ("linear", "attn"): ("tensorrt-llm", "llama.cpp", "mlx-lm", "transformers+file"),
    ("linear", "block"): ("tensorrt-llm", "transformers+file"),
}


def runs_in(form: str | None, mode: str | None, method: str | None = "nbl", family: str | None = None) -> list[str]:
    """The runtimes an output of this form and mode loads in; drop (no map) is nbl's form. With the base's
    `family`, only those its entry claims (nbl/families.py): our vLLM plugin builds the layers of some families
    only, and a fold block output is the family's own class, which a runtime runs or not. Without it (an older
    record), the table's claims, which hold for the four dense families every older output was."""
    if method == "drop" or form is None:
        form = FORM
    found = list(RUNS_IN.get((form, mode or "attn"), ()))
    entry = FAMILIES.get(family) if family else None
    if entry is None:
        return found
    if form == FORM:
        return [r for r in found if r != "vllm+plugin" or entry.plugin]
    if (form, mode) == ("fold", "block"):
        return [r for r in found if r == "transformers" or r in entry.plain]
    return found


def writes_decilm(form: str, mode: str) -> bool:
    """Whether the output is a DeciLMForCausalLM (block_configs) rather than the base's class or ours."""
    return form == "linear" or (form == "fold" and mode == "attn")


def request_error(form: str, mode: str, method: str, criterion: str, k_auto: bool) -> str | None:
    """Why a request's compression section cannot be met in this form (None: it can); no model needed."""
    if form not in FORMS:
        return f"form must be one of {', '.join(FORMS)}, got {form!r}"
    if form == FORM:
        return None
    if method != "nbl":
        return f"form {form!r} writes a fitted map: method must be 'nbl' (drop is written as form 'nbl')"
    if criterion not in ONE_SHOT:
        return f"form {form!r} ranks layers on its own fit with criterion {', '.join(ONE_SHOT)}, got {criterion!r}"
    if k_auto:
        return f"form {form!r} needs explicit k values (k auto measures nbl's maps)"
    return None


def layer_error(form: str, layers) -> str | None:
    """Why these layers cannot be replaced in this form: layer 0 has no previous MLP to fold into."""
    if form == "fold" and 0 in set(layers):
        return "layer 0 cannot be folded: it has no previous block's MLP (form 'fold' skips it)"
    return None


def family_error(form: str, mode: str, family: str, config: dict) -> str | None:
    """Why a base model (its family and config.json) cannot be written in this form (None: it can). The one rule:
    the API at submit and in estimates (its config.json, nbl/model/checks.py), the worker before calibrating."""
    if form == "fold" and mode == "block":
        if family not in FOLD_BLOCK_FAMILIES:
            why = FAMILIES[family].fold if family in FAMILIES else "is not written for this family"
            return (
                f"form 'fold' in mode 'block' {why} ({family!r}); it writes "
                f"{', '.join(FOLD_BLOCK_FAMILIES)} models: use form 'nbl'"
            )
        return None
    if not writes_decilm(form, mode):
        return None
    what = f"form {form!r} in mode {mode!r} writes DeciLM (Nemotron-NAS), which"
    if family not in DECILM_FAMILIES:
        reason = FAMILIES[family].decilm if family in FAMILIES else "is Llama-shaped"
        other = "form 'fold' in mode 'block', or 'nbl'" if family in FOLD_BLOCK_FAMILIES else "form 'nbl'"
        return f"{what} {reason}: it cannot express a {family} model; use {other}"
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    head_dim = config.get("head_dim") or (hidden // heads if hidden and heads else None)
    inter = config.get("intermediate_size") or 0
    if config.get("attention_bias") or config.get("mlp_bias"):
        return f"{what} has no biases: this {family} model has attention or MLP biases"
    if hidden and heads and head_dim != hidden // heads:
        return f"{what} derives head_dim as hidden_size / heads ({hidden // heads}); this model's is {head_dim}"
    if not inter or inter % FFN_ROUND:
        return f"{what} gives the MLP width as ffn_mult rounded to {FFN_ROUND}: intermediate_size {inter} is not a multiple"
    # a sliding window config.json may leave out, as transformers' config class fills it in: the API judges the
    # file, the worker the loaded config, and both must say the same
    window = config["sliding_window"] if "sliding_window" in config else FAMILIES[family].window
    if window and config.get("use_sliding_window", True):
        return f"{what} has no sliding window: this model's is {_shown(window)}"
    if config.get("hidden_act", "silu") != "silu":
        return f"{what} runs SwiGLU MLPs: this model's activation is {_shown(config.get('hidden_act'))}"
    return None


def _shown(value) -> str:
    """A config's value in a message: short scalars as they are, anything else by its kind (a config is user
    input, and the repr of a nested list could run to a megabyte)."""
    if isinstance(value, (int, float, str)) and len(str(value)) <= 64:
        return repr(value)
    return f"a {type(value).__name__}"
