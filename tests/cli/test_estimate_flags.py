"""`nbl estimate` takes `nbl compress`'s command line as it stands (issue 24 §21): every flag, from the one
definition; a hostile config.json is exit 2 with the field named, at once (§1, §5); the time range of a model
spread over a GPU, its host and disk runs low to high (§17)."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from testkit.model_configs import LLAMA_70B, TINY, write_config

from cli.compress import add_compress
from cli.estimate import add_estimate
from cli.main import main

REPO = Path(__file__).resolve().parents[2]
ANSWER_S = 60  # generous: an estimate takes well under a second; before the fix a huge config never returned
SMALL = {**TINY, "max_position_embeddings": 4096}  # a small model that takes compress's default 2,048-token blocks
# values tried on a flag until compress's parser takes one
CANDIDATES = ("1", "0.1", "wikitext2:ppl:+10%", "x", "w8a8", "bfloat16")


def parsers() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    sub = argparse.ArgumentParser(prog="nbl").add_subparsers(dest="command")
    add_compress(sub)
    add_estimate(sub)
    return sub.choices["compress"], sub.choices["estimate"]


def parse(parser, argv: list[str]) -> argparse.Namespace | None:
    """The namespace, or None where the parser refuses the line (it prints to stderr and exits)."""
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            return parser.parse_args(argv)
        except SystemExit:
            return None


def compress_flags() -> dict[str, list[str]]:
    """Every option of `nbl compress --help` but --model and --help, each with a value its parser accepts: its
    default where it has a plain one, else the first candidate it takes (none for a switch)."""
    compress, _ = parsers()
    flags = {}
    for action in compress._actions:
        flag = action.option_strings[0] if action.option_strings else None
        if flag in (None, "-h", "--model"):
            continue
        if action.nargs == 0:
            flags[flag] = []
            continue
        plain = [str(action.default)] if isinstance(action.default, (str, int, float)) else []
        value = next((v for v in [*plain, *CANDIDATES] if parse(compress, ["--model", "m", "--k", "1", flag, v])), None)
        assert value is not None, f"no candidate value for compress {flag}: add one to CANDIDATES"
        flags[flag] = [value]
    return flags


def test_every_compress_flag_is_an_estimate_flag_with_the_same_meaning():
    compress, estimate = parsers()
    flags = compress_flags()
    assert {"--dataset", "--text-field", "--out", "--gate", "--k"} <= set(flags)  # the listing works
    for flag, value in flags.items():
        k = [] if flag == "--k" else ["--k", "1"]
        theirs = parse(compress, ["--model", "m", *k, flag, *value])
        ours = parse(estimate, ["--model", "m", *k, flag, *value])
        assert ours is not None, f"nbl estimate refuses nbl compress's {flag} {' '.join(value)}"
        dest = compress._option_string_actions[flag].dest
        assert getattr(ours, dest) == getattr(theirs, dest), flag


def test_a_whole_compress_command_line_is_estimated(tmp_path, capsys):
    model = write_config(tmp_path / "small", SMALL)
    # --quantize needs form fold, which the heal flags refuse (in both commands): it is estimated below
    flags = {flag: value for flag, value in compress_flags().items() if flag != "--quantize"}
    argv = [a for flag, value in flags.items() for a in (flag, *value)]
    code = main(["estimate", "--model", str(model), *argv])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert json.loads(out.out)["disk"]["outputs"] > 0  # --json and --out, as compress's


def test_quantize_is_estimated_with_its_copies_on_disk(tmp_path, capsys):
    model = write_config(tmp_path / "small", SMALL)
    argv = ["--model", str(model), "--k", "1", "--form", "fold", "--mode", "block", "--out", str(tmp_path / "o")]
    disks = []
    for quantize in ([], ["--quantize", "w8a8,w4a16"]):
        assert main(["estimate", *argv, *quantize, "--json"]) == 0
        disks.append(json.loads(capsys.readouterr().out)["disk"])
    assert disks[0]["quantized"] == 0 < disks[1]["quantized"] < 2 * disks[1]["outputs"]


@pytest.mark.parametrize("form", ["nbl", "linear"])
def test_quantize_with_a_form_it_cannot_take_is_refused_as_compress_refuses_it(form, tmp_path, capsys):
    model = write_config(tmp_path / "small", SMALL)
    argv = ["--model", str(model), "--k", "1", "--form", form, "--quantize", "w8a8", "--out", str(tmp_path / "o")]
    said = []
    for command in ("estimate", "compress"):
        assert main([command, *argv]) == 2
        said.append(capsys.readouterr().err.splitlines()[0])
    assert said[0] == said[1] and f"the {form} form" in said[0], said


def test_out_takes_the_directory_in_both(tmp_path, capsys):
    compress, estimate = parsers()
    for parser in (compress, estimate):
        assert parse(parser, ["--model", "m", "--k", "1", "--out"]) is None  # a value is required in both
        assert parse(parser, ["--model", "m", "--k", "1", "--out", "o"]).out == Path("o")
    model = write_config(tmp_path / "small", SMALL)
    figures = []
    for out in ([], ["--out", str(tmp_path / "never-written")]):
        assert main(["estimate", "--model", str(model), "--k", "1", "--json", *out]) == 0
        figures.append(json.loads(capsys.readouterr().out)["disk"]["outputs"])
    assert figures[0] == 0 < figures[1] and not (tmp_path / "never-written").exists()


def nbl_estimate(model: Path, *argv: str) -> subprocess.CompletedProcess:
    """In a child process, so that an estimate that never returns fails the test instead of hanging it."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "cli.main", "estimate", "--model", str(model), *argv],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=ANSWER_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"nbl estimate did not answer within {ANSWER_S} s")


@pytest.mark.parametrize(
    "field,value,says",
    [
        ("num_hidden_layers", 10**12, "num_hidden_layers must be at most 4,096, got 1000000000000"),
        ("num_hidden_layers", 10**300, "num_hidden_layers must be at most 4,096, got a number of about 301 digits"),
        ("vocab_size", 2**22 + 1, "vocab_size must be at most 4,194,304"),
        ("max_position_embeddings", True, "max_position_embeddings must be a positive integer, got True"),
    ],
    ids=["layers=10**12", "layers=10**300", "vocab=2**22+1", "context=True"],
)
def test_a_hostile_config_is_exit_2_naming_the_field(tmp_path, field, value, says):
    model = write_config(tmp_path / "m", {**LLAMA_70B, field: value})
    done = nbl_estimate(model, "--k", "auto", "--criterion", "greedy", "--max-ppl-increase", "0.1", "--json")
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.startswith("nbl: error: ") and says in done.stderr and "Traceback" not in done.stderr


def test_a_config_nested_past_the_parsers_depth_is_exit_2(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"hidden_size": ' + "[" * 100_000 + "]" * 100_000 + "}")
    done = nbl_estimate(tmp_path / "m", "--k", "1")
    assert done.returncode == 2 and "no readable config.json" in done.stderr and "Traceback" not in done.stderr


def test_a_70b_job_spread_over_a_24_gib_gpu_runs_low_to_high(tmp_path, capsys):
    model = write_config(tmp_path / "llama-70b", LLAMA_70B)
    common = ["estimate", "--model", str(model), "--k", "8", "--device-memory", "24", "--host-memory", "128"]
    assert main([*common, "--job", "--devices", "cuda:0", "--json"]) == 0
    est = json.loads(capsys.readouterr().out)
    assert est["disk"]["offload"] > 0 and 0 < est["seconds"][0] < est["seconds"][1]
    assert main([*common, "--device", "cuda:0", "--json"]) == 0  # compress's --device names the one device
    assert json.loads(capsys.readouterr().out)["devices"] == ["cuda:0"]
    assert main(common) == 2  # the memory of which devices? not ignored in silence
    assert "--device-memory and --host-memory describe the devices of --devices" in capsys.readouterr().err
