"""`nbl compress --form` end to end on tiny checkpoints: the job's path (load check in a fresh process, card,
each output's evaluation), the typed result's form and runs_in, and the refusals (one line, exit 2)."""

import json

import pytest
from testkit.models import save_tiny_checkpoint

from cli import main as cli


def _run(capsys, *args):
    code = cli.main(["compress", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def _args(model, text_file, out, *extra):
    return [
        "--model",
        model,
        "--dataset",
        text_file,
        "--num-samples",
        12,
        "--seq-len",
        64,
        "--out",
        out,
        "--json",
        *extra,
    ]


@pytest.mark.slow  # three compressions, each reloaded in a fresh process
@pytest.mark.parametrize(
    "form,mode,family", [("fold", "block", "qwen2"), ("fold", "attn", "llama"), ("linear", "attn", "llama")]
)
def test_compress_form_end_to_end(form, mode, family, text_file, tmp_path, capsys):
    base = save_tiny_checkpoint(tmp_path / "base", family, layers=5, intermediate_size=256)
    code, out, err = _run(
        capsys,
        *_args(
            base,
            text_file,
            tmp_path / "out",
            "--k",
            "1,2",
            "--mode",
            mode,
            "--form",
            form,
            "--criterion",
            "nmse",
            "--eval",
            "--max-tokens",
            256,
        ),
    )
    assert code == 0, err
    r = json.loads(out)
    for o in r["outputs"]:
        assert o["form"] == form and o["runs_in"]
        if form == "fold":
            assert 0 not in o["replaced_layers"]
        check = r["load_check"][f"k{o['k']}"]  # reloaded in a fresh process, against the layer-by-layer reference
        assert check["max_abs_diff"] <= check["tolerance"]
        card = (tmp_path / "out" / f"k{o['k']}" / "README.md").read_text()
        assert "## Runs in" in card and "per the runtime's code" in card
    assert [o["form"] for o in r["result"]["outputs"]] == [form, form]
    # evaluated reloaded from disk: the base's class (fold block) or our DeciLM file
    assert all(o["metrics"]["perplexity"]["wikitext2"]["ppl"] > 1 for o in r["result"]["outputs"])
    if form == "fold":
        assert r["scores"][0][mode]["eligible"] is False
    if (form, mode) == ("fold", "block"):
        assert r["outputs"][0]["runs_in"][0] == "transformers"
        assert "trust_remote_code" not in card.split("## Runs in")[1]


@pytest.mark.parametrize(
    "extra,message",
    [
        (["--form", "linear", "--mode", "attn"], "cannot express a qwen2 model"),
        (["--form", "fold", "--method", "drop"], "method must be 'nbl'"),
        (["--form", "fold", "--criterion", "greedy"], "criterion"),
    ],
)
def test_form_refusals_are_one_line(extra, message, text_file, tmp_path, capsys):
    base = save_tiny_checkpoint(tmp_path / "base", "qwen2", layers=4, intermediate_size=256)
    capsys.readouterr()  # the checkpoint's own progress bars
    code, out, err = _run(capsys, *_args(base, text_file, tmp_path / "out", "--k", "1", "--no-load-check", *extra))
    assert code == 2 and message in err, err
    assert len(err.strip().splitlines()) == 1


def test_unknown_form_is_an_argparse_error(text_file, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["compress", "--model", "x", "--k", "1", "--form", "gguf"])
    assert exc.value.code == 2 and "invalid choice: 'gguf'" in capsys.readouterr().err
