"""The engine's former one-pass calibration, kept as a reference for the layer-by-layer path.

Until issue 12 the engine ran every calibration batch through the whole model at once, with forward
hooks on each decoder layer adding (h, attention output, block output) into float64 sums about the
first batch's mean (products in float32). The layer-by-layer path must give the same sums; this
self-contained copy of the old algorithm (it imports nothing from the engine) is what it is checked
against, so the check can fail.
"""

from __future__ import annotations

import torch

# The module whose output is the attention branch's (what the layer adds to the residual): attention itself, or
# Gemma's norm after it. Written here by hand, not read from the engine's table (nbl/families.py), so a wrong
# entry there fails this reference; tests/worker/engine/modeling/test_family_layers.py checks the hand-written
# semantics (h' = h + this output) in float64.
ATTN_OUT = {"gemma2": "post_attention_layernorm", "gemma3_text": "post_attention_layernorm"}


def _zeros(d):
    z = lambda *s: torch.zeros(*s, dtype=torch.float64)  # noqa: E731
    return {
        "n": z(()),
        "x": z(d),
        "xx": z(d, d),
        **{
            f"{b}.{f}": z(d, d) if f in ("yy", "yx") else z(d) if f == "y" else z(())
            for b in ("attn", "block")
            for f in ("y", "yy", "yx", "cos")
        },
    }


@torch.no_grad()
def one_pass_sums(model, blocks: torch.Tensor, batch_size: int, holdout: int) -> list[dict]:
    """Per layer: {"shift_x", "shift_attn", "shift_block", "fit": {...}, "held": {...}} in float64."""
    layers = model.model.layers
    d = model.config.hidden_size
    out = [{"fit": _zeros(d), "held": _zeros(d)} for _ in layers]
    attn: dict[int, torch.Tensor] = {}
    split = {"name": "fit"}

    def layer_hook(i):
        def hook(module, args, kwargs, output):
            h = (args[0] if args else kwargs["hidden_states"]).reshape(-1, d)
            h_in = args[0] if args else kwargs["hidden_states"]
            ys = {"attn": attn.pop(i).reshape(-1, d), "block": (output - h_in).reshape(-1, d)}
            r = out[i]
            if "shift_x" not in r:
                r["shift_x"] = h.double().mean(0)
                for b, y in ys.items():
                    r[f"shift_{b}"] = y.double().mean(0)
            s = r[split["name"]]
            x = h.float() - r["shift_x"].float()
            s["n"] += h.shape[0]
            s["x"] += x.sum(0, dtype=torch.float64)
            s["xx"] += x.T @ x
            for b, y_raw in ys.items():
                y = y_raw.float() - r[f"shift_{b}"].float()
                s[f"{b}.y"] += y.sum(0, dtype=torch.float64)
                s[f"{b}.yy"] += y.T @ y
                s[f"{b}.yx"] += y.T @ x
                hf = h.float()
                s[f"{b}.cos"] += torch.nn.functional.cosine_similarity(hf, hf + y_raw.float(), dim=-1).sum(
                    dtype=torch.float64
                )

        return hook

    handles = []
    for i, layer in enumerate(layers):
        branch = getattr(layer, ATTN_OUT.get(model.config.model_type, "self_attn"))
        handles.append(
            branch.register_forward_hook(lambda m, a, o, i=i: attn.__setitem__(i, o[0] if isinstance(o, tuple) else o))
        )
        handles.append(layer.register_forward_hook(layer_hook(i), with_kwargs=True))
    n = blocks.shape[0]
    try:
        for lo, hi, name in [(0, n - holdout, "fit"), (n - holdout, n, "held")]:
            split["name"] = name
            for start in range(lo, hi, batch_size):
                model.model(input_ids=blocks[start : min(start + batch_size, hi)], use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return out
