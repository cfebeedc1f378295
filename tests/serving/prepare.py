"""Make the outputs the vLLM tests serve, and their transformers reference (run in the project's venv).

    python tests/serving/prepare.py WORKDIR      ->  WORKDIR/<name>/ (outputs), WORKDIR/reference.json

Outputs (plan.OUTPUTS), all written by `nbl compress` (cli.compress, called in this process so torch
and the model load once per run, not per output):
- SmolLM2-135M (the real GGUF) from one small calibration shared through the statistics cache, and
  the converted base itself;
- tiny random Mistral, Qwen2 and Qwen3 checkpoints.
Reference: for each, greedy decoding of 16 tokens in fp32 with transformers (the output's own
modeling_nbl.py, trust_remote_code), and the log-probability of each chosen token.
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
# the checkout first: tests/nbl, service, worker and cli (the tests mirroring the code) would shadow the packages
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parent), str(HERE)]  # the code, tests/testkit, plan.py

from plan import NEW_TOKENS, OUTPUTS  # noqa: E402
from testkit.models import DATA_DIR, save_tiny_checkpoint, smollm2_gguf  # noqa: E402

from cli import main as cli  # noqa: E402

SMOLLM2_PROMPTS = ["The capital of France is", "def fibonacci(n):", "Neural networks learn by"]
TINY_PROMPTS = ["hello world", "The quick brown fox", "0123456789"]
TINY_SHAPE = {
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
}  # vLLM's CPU attention: head_dim >= 32


def compress(model: str | Path, out: Path, *args: str) -> dict[int, Path]:
    buf = StringIO()
    with redirect_stdout(buf):
        code = cli.main(["compress", "--model", str(model), "--out", str(out), "--json", *map(str, args)])
    if code != 0:
        raise SystemExit(f"nbl compress failed ({code}) for {out}")
    return {o["k"]: Path(o["path"]) for o in json.loads(buf.getvalue())["outputs"]}


def make_outputs(work: Path) -> dict[str, Path]:
    gguf = smollm2_gguf()
    calib = work / "calib.jsonl"
    docs = json.loads((DATA_DIR / "c4" / "c4_demo.json").read_text())[:40]
    calib.write_text("".join(json.dumps({"text": d["text"]}) + "\n" for d in docs))

    made: dict[str, Path] = {}
    groups: dict[tuple, list[str]] = {}
    for name, (model, mode, method, k, criterion) in OUTPUTS.items():
        if mode is not None:
            groups.setdefault((model, mode, method, criterion), []).append(name)
    for (model, mode, method, criterion), names in groups.items():
        if model == "smollm2":
            source, data = gguf, ["--dataset", "c4", "--num-samples", 8, "--seq-len", 128]
        else:
            source = save_tiny_checkpoint(work / f"tiny-{model}-base", model, seed=1, **TINY_SHAPE)
            data = ["--dataset", calib, "--num-samples", 8, "--seq-len", 64]
        ks = ",".join(str(OUTPUTS[n][3]) for n in names)
        paths = compress(
            source,
            work / f"{model}-{mode}-{method}-{criterion}",
            *data,
            "--mode",
            mode,
            "--method",
            method,
            "--criterion",
            criterion,
            "--k",
            ks,
        )
        made.update({n: paths[OUTPUTS[n][3]] for n in names})
    # the GGUF converted by the runs above (NBL_HOME/models), served as the base
    made["smollm2-base"] = next((Path(os.environ["NBL_HOME"]) / "models").glob("gguf-*"))
    return made


@torch.no_grad()
def greedy(model, ids: list[int]) -> tuple[list[int], list[float]]:
    """16 greedy tokens (no stop at EOS, as vLLM's ignore_eos) and the log-probability of each."""
    tokens, logprobs, past = [], [], None
    step = torch.tensor([ids])
    for _ in range(NEW_TOKENS):
        out = model(input_ids=step, past_key_values=past, use_cache=True)
        lp = torch.log_softmax(out.logits[0, -1].float(), dim=-1)  # (V,)
        t = int(lp.argmax())
        tokens.append(t)
        logprobs.append(float(lp[t]))
        past, step = out.past_key_values, torch.tensor([[t]])
    return tokens, logprobs


def reference(path: Path, prompts: list[str]) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path, trust_remote_code=True)
    model = AutoModelForCausalLM.from_pretrained(path, trust_remote_code=True, dtype=torch.float32).eval()
    cfg = model.config
    plan = getattr(cfg, "nbl", None) or {"layers": []}
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    ids = [tok(p).input_ids for p in prompts]
    runs = [greedy(model, i) for i in ids]
    return {
        "path": str(path),
        "nbl": plan,
        "prompts": ids,
        "tokens": [r[0] for r in runs],
        "logprobs": [r[1] for r in runs],
        "num_layers": cfg.num_hidden_layers,
        "attention_layers": cfg.num_hidden_layers - len(plan["layers"]),
        "kv_bytes_per_token_layer": 2 * cfg.num_key_value_heads * head_dim * 4,  # K and V, fp32
    }


def main(work: Path) -> None:
    made = make_outputs(work)
    ref = {
        name: reference(path, SMOLLM2_PROMPTS if name.startswith("smollm2") else TINY_PROMPTS)
        for name, path in made.items()
    }
    (work / "reference.json").write_text(json.dumps(ref, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
