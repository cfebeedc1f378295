"""`nbl estimate` on the mixture-of-experts shapes of docs/sizing.md: Qwen3-235B-A22B and Mixtral-8x22B.

    .venv/bin/python bench/estimate_moe.py [nbl estimate's flags]    (default: --num-samples 256 --seq-len 2048 --k 8 --job)

Writes each config.json (tests/testkit/model_configs.py, the public configs' numbers) to a temporary directory and runs
`nbl estimate --model DIR` on it, in this process: cli/estimate.py's own code and output, as the plain command
prints it, after a line with the model's total and active parameters.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from testkit.model_configs import MIXTRAL_8X22B, QWEN3_235B_A22B, write_config  # noqa: E402

from cli.main import main  # noqa: E402
from nbl.sizing.shapes import param_counts, shape_of  # noqa: E402

MODELS = {"qwen3-235b-a22b": QWEN3_235B_A22B, "mixtral-8x22b": MIXTRAL_8X22B}
DEFAULT = ["--num-samples", "256", "--seq-len", "2048", "--k", "8", "--job"]


def main_(argv: list[str]) -> int:
    flags = argv or DEFAULT
    home = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # the model is ./NAME, as the output shows it
        for name, config in MODELS.items():
            write_config(Path(name), config)
            total, active = param_counts(shape_of(config))
            print(f"# {name}: {total / 1e9:.2f}B parameters, {active / 1e9:.2f}B active")
            print(f"$ nbl estimate --model ./{name} {' '.join(flags)}")
            code = main(["estimate", "--model", f"./{name}", *flags])
            if code:
                break
            print()
        os.chdir(home)
    return code


if __name__ == "__main__":
    sys.exit(main_(sys.argv[1:]))
