"""`nbl compress --eval --gate`: the job's quality gates, locally, through the same pipeline. An output that
fails a gate gets no card (it is not published) and a warning says so; none passing exits 5. The limit
comes from an ungated run's own numbers, so one output passes and the other fails."""

import json

import pytest

from cli import main as cli

PPL = "perplexity/wikitext2/ppl"


def _run(capsys, *args):
    code = cli.main(["compress", *map(str, args)])
    out = capsys.readouterr()
    return code, out.out, out.err


def _args(tiny_dir, text_file, out, k, *extra):
    return [
        "--model",
        tiny_dir,
        "--dataset",
        text_file,
        "--num-samples",
        12,
        "--seq-len",
        64,
        "--method",
        "drop",
        "--k",
        k,
        "--out",
        out,
        "--json",
        "--eval",
        "--perplexity",
        "wikitext2",
        "--max-tokens",
        512,
        "--no-load-check",  # test_compress_cli checks the reload
        *extra,
    ]


@pytest.mark.slow
def test_gates_keep_the_passing_output_and_exit_5_when_none_passes(tiny_dir, text_file, tmp_path, capsys):
    code, out, err = _run(capsys, *_args(tiny_dir, text_file, tmp_path / "free", "1,3"))
    assert code == 0, err
    ev = json.loads(out)["evaluation"]
    rises = {
        k: ev[f"k{k}"]["perplexity"]["wikitext2"]["ppl"] / ev[f"k{k}"]["base"]["perplexity"]["wikitext2"]["ppl"] - 1
        for k in (1, 3)
    }
    better, worse = sorted(rises, key=rises.get)
    assert rises[worse] > 0 and rises[worse] - rises[better] > 1e-3, rises
    low = max(rises[better], 0.0)
    pct = 100 * (low + (rises[worse] - low) / 2)  # between the two rises
    assert "warning: evaluation truncated" in err and "of" in err  # 512 of WikiText-2's tokens

    code, out, err = _run(
        capsys, *_args(tiny_dir, text_file, tmp_path / "gated", "1,3", "--gate", f"wikitext2:ppl:+{pct}%")
    )
    assert code == 0, err
    gates = json.loads(out)["gates"]
    assert gates["passed"] is True
    assert {(c["output"], c["passed"]) for c in gates["checks"]} == {(f"k{better}", True), (f"k{worse}", False)}
    assert f"gate FAIL: k{worse} {PPL}" in err and f"warning: k={worse} is not published" in err
    assert (tmp_path / "gated" / f"k{better}" / "README.md").is_file()
    assert not (tmp_path / "gated" / f"k{worse}" / "README.md").exists()  # saved, checked, but not published

    code, out, err = _run(
        capsys, *_args(tiny_dir, text_file, tmp_path / "none", worse, "--gate", f"wikitext2:ppl:+{pct}%")
    )
    assert code == 5, err
    assert "no output passed the quality gates" in err and json.loads(out)["gates"]["passed"] is False
    assert not (tmp_path / "none" / "README.md").exists()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--gate", "c4:ppl:+10%"], "the corpus 'c4' is not measured; add it to --perplexity"),
        (["--gate", "arc_easy:acc:-0.02"], "the task 'arc_easy' is not measured; add it to --tasks"),
    ],
)
def test_gate_flags_are_checked_before_compressing(tiny_dir, text_file, tmp_path, capsys, extra, message):
    code, _, err = _run(capsys, *_args(tiny_dir, text_file, tmp_path / "out", "1", *extra))
    assert code == 2 and message in err and not (tmp_path / "out").exists(), err
    code, _, err = _run(
        capsys,
        "--model",
        tiny_dir,
        "--dataset",
        text_file,
        "--k",
        "1",
        "--out",
        tmp_path / "o",
        "--gate",
        "wikitext2:ppl:+10%",
    )
    assert code == 2 and "give --eval" in err and not (tmp_path / "o").exists()


def test_a_malformed_gate_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["compress", "--model", "m", "--k", "1", "--eval", "--gate", "wikitext2:ppl:-10%"])
    assert e.value.code == 2 and "a ppl gate allows a rise (+)" in capsys.readouterr().err
