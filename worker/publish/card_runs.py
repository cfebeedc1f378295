"""The card's "Runs in" table: each runtime an output's form loads in (nbl/outputs/forms.py), with its snippet.

transformers is tested by this service for every form (tests/worker/engine/forms/test_forms_*.py load each form token-exact),
vLLM with no plugin on the fold forms (tests/serving/test_vllm_forms.py) and with the plugin on nbl's, llama.cpp on
the DeciLM forms (Llama-shaped by construction; tests/llama_cpp/test_gguf_forms.py, test_gguf_decilm.py). Fold
block through llama.cpp is tested for each family whose entry claims it (nbl/families.py `plain`) but does not
list it `untested` (Qwen2: no Qwen vocabulary offline for the converter); without the family (an older record)
the card says "per the runtime's code" there. The other rows are read from the runtimes' own code, and the card
says so.
"""

from __future__ import annotations

from nbl.families import FAMILIES
from nbl.outputs.forms import FORM, runs_in, writes_decilm

# runtimes this service's tests load the outputs in, token-exact against the compressed model in memory
TESTED = {"transformers", "transformers+file", "vllm", "vllm+plugin"}
LABELS = {
    "transformers": "transformers",
    "transformers+file": "transformers (our modeling file)",
    "vllm": "vLLM",
    "vllm+plugin": "vLLM (nbl-vllm plugin)",
    "sglang": "SGLang",
    "tensorrt-llm": "TensorRT-LLM",
    "llama.cpp": "llama.cpp",
    "mlx-lm": "mlx-lm",
}


def form_sentence(form: str, mode: str) -> str:
    """What the form means for this output, for the card's first section."""
    if form == "fold" and mode == "block":
        return (
            "Written in form `fold`: each run of removed blocks became one linear map of the MLP output just "
            "before it, folded into that MLP's `down_proj` (`W_down ← (I + T)·W_down`), so this is a plain "
            "checkpoint of the base architecture with fewer layers: no custom code.\n"
        )
    if form == "fold":
        return (
            "Written in form `fold`: each removed attention became a linear map of the previous block's MLP "
            "output, folded into that `down_proj`; the layer is a DeciLM (Nemotron-NAS) attention `no_op`.\n"
        )
    if form == "linear":
        what = (
            "attention `replace_with_linear` (`h + W·LN1(h)`)"
            if mode == "attn"
            else "attention `no_op` and ffn `replace_with_linear` (`h + W·LN2(h)`)"
        )
        return (
            f"Written in form `linear`: DeciLM (Nemotron-NAS) `block_configs`, each replaced layer {what}, no bias.\n"
        )
    return ""


def _snippet(runtime: str, where: str, sub: str, remote: bool) -> str:
    trust = ", trust_remote_code=True" if remote else ""
    if runtime.startswith("transformers"):
        return (
            "```python\nfrom transformers import AutoModelForCausalLM\n"
            f'model = AutoModelForCausalLM.from_pretrained("{where}"{sub}{trust})\n```'
        )
    if runtime == "vllm":
        return f"```bash\nvllm serve {where}{' --trust-remote-code' if remote else ''}\n```"
    if runtime == "sglang":
        return (
            f"```bash\npython -m sglang.launch_server --model-path {where}"
            f"{' --trust-remote-code' if remote else ''}\n```"
        )
    if runtime == "tensorrt-llm":
        return f"```bash\ntrtllm-serve {where}\n```"
    if runtime == "llama.cpp":
        return (
            f"```bash\npython convert_hf_to_gguf.py {where} --outfile model.gguf   # llama.cpp's converter\n"
            "llama-cli -m model.gguf -p Hello\n```"
        )
    if runtime == "mlx-lm":
        return f"```bash\nmlx_lm.generate --model {where} --prompt Hello\n```"
    return "see above"


def _plain_tested(runtime: str, form: str, mode: str, family: str | None) -> bool:
    """Whether our tests load a fold block output (the family's own class) of this family in `runtime`."""
    entry = FAMILIES.get(family) if family else None
    return (form, mode) == ("fold", "block") and entry is not None and runtime not in entry.untested


def runs_in_section(
    form: str | None, mode: str, method: str, repo_id: str | None, subfolder: str | None, family: str | None = None
) -> str:
    """The table and, for forms other than nbl, a snippet per runtime (nbl's are in "How to load")."""
    form = form or FORM
    where = repo_id or "path/to/this/directory"
    sub = f', subfolder="{subfolder}"' if subfolder else ""
    remote = writes_decilm(form, mode)
    text = "| runtime | loads it | verified |\n|---|---|---|\n"
    for r in runs_in(form, mode, method, family):
        how = (
            "through the modeling file shipped here (`trust_remote_code=True`)"
            if r.endswith("+file")
            else ("with the nbl-vllm plugin" if r.endswith("+plugin") else "as is, no code of ours")
        )
        tested = r in TESTED or (r == "llama.cpp" and (remote or _plain_tested(r, form, mode, family)))
        seen = "tested by nbl-service" if tested else "per the runtime's code"
        text += f"| {LABELS.get(r, r)} | {how} | {seen} |\n"
    if form == FORM or method == "drop":
        return text + '\nSnippets: see "How to load" below.\n'
    if remote:
        text += (
            "\nThe runtimes that read DeciLM natively ignore `modeling_decilm.py`; vLLM and SGLang read the "
            "`nemotron-nas` config through it (`--trust-remote-code`).\n"
        )
    for r in runs_in(form, mode, method, family):
        text += f"\n{LABELS.get(r, r)}:\n\n{_snippet(r, where, sub, remote and r in ('transformers+file', 'vllm', 'sglang'))}\n"
    return text
