"""The card's "Runs in" table per form: the runtimes nbl/outputs/forms.py names, which of them this service tests, and a
snippet each; a fold-block output's card asks for no remote code anywhere."""

from worker.publish.card import CardInfo, card_text


def _report(form=None, mode="block"):
    recipe = {"mode": mode, "method": "nbl", "criterion": "cosine", "k": 2, **({"form": form} if form else {})}
    return {
        "base_model": "acme/m",
        "recipe": recipe,
        "replaced_layers": [3, 4],
        "layers": [
            {"layer": 0, mode: {"cosine": None, "eligible": False, "reason": "layer 0 ..."}},
            {"layer": 3, mode: {"cosine": 0.9}},
            {"layer": 4, mode: {"cosine": 0.95}},
        ],
    }


def test_fold_block_card_lists_stock_runtimes_without_remote_code():
    text = card_text(CardInfo(report=_report("fold"), repo_id="team/m", plot=None))
    runs = text.split("## Runs in")[1].split("## Citation")[0]
    assert "| transformers | as is, no code of ours | tested by nbl-service |" in runs
    assert "| vLLM | as is, no code of ours | tested by nbl-service |" in runs
    assert "| SGLang | as is, no code of ours | per the runtime's code |" in runs
    assert "trust_remote_code" not in runs and "modeling_nbl" not in text and "## How to load" not in text
    assert 'from_pretrained("team/m")' in runs and "vllm serve team/m" in runs
    assert "folded into that MLP's `down_proj`" in text


def test_decilm_card_loads_through_the_shipped_file():
    runs = card_text(CardInfo(report=_report("linear", "attn"), plot=None)).split("## Runs in")[1]
    assert "| transformers (our modeling file) | through the modeling file shipped here" in runs
    assert "| llama.cpp | as is, no code of ours | tested by nbl-service |" in runs  # tests/llama_cpp
    assert "| mlx-lm | as is, no code of ours | per the runtime's code |" in runs
    assert "trust_remote_code=True" in runs


def test_nbl_card_keeps_its_loading_section():
    text = card_text(CardInfo(report=_report(None, "attn"), plot=None))
    assert (
        "## How to load" in text
        and "| vLLM (nbl-vllm plugin) | with the nbl-vllm plugin | tested by nbl-service |" in text
    )


def test_fold_block_card_says_llama_cpp_per_family():
    """llama.cpp runs a fold block output of each family its entry claims; tested where tests/llama_cpp decodes one
    token-exact (qwen3_moe), per the runtime's code where the entry says untested (qwen2), absent where unclaimed."""

    def row(family):
        report = {**_report("fold"), "base_family": family}
        runs = card_text(CardInfo(report=report, plot=None)).split("## Runs in")[1].split("## Citation")[0]
        return next((line for line in runs.splitlines() if line.startswith("| llama.cpp |")), None)

    assert row("qwen3_moe") == "| llama.cpp | as is, no code of ours | tested by nbl-service |"
    assert row("phi3") == "| llama.cpp | as is, no code of ours | tested by nbl-service |"
    assert row("qwen2") == "| llama.cpp | as is, no code of ours | per the runtime's code |"
    assert row(None) == "| llama.cpp | as is, no code of ours | per the runtime's code |"
    assert row("gemma3_text") is None  # its fold is refused: nothing claimed
