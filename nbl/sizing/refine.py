"""What the refine stage costs (worker/engine/refine/stage.py): tokens through layers, and the memory healing holds.

Per output:
    refit   one pass of the calibration blocks through layers 0..last replaced (at most L), plus one sweep of
            each replaced layer: at most tokens x (L + k) layer passes, and calibration's memory (one layer's
            weights and sums, one batch, the hidden states of every block on the host)
    heal    steps x blocks a step forward and backward through the whole model (a backward ~2 forwards: 3 in all), and
            the held-out blocks forward twice (perplexity before and after), and so the guard's (the selection
            dataset's blocks, when it is not the calibration's); once per run, the teacher's logits on the
            training blocks (one forward each)
Healing holds the whole model (the only refine phase that does), one block's activations kept for the backward,
the maps' float32 copies with their gradients and Adam's two moments (4 x k d² floats), and the teacher's top-64
logits of every training position (values float32 + ids int64). Pure: no torch.
"""

from __future__ import annotations

from nbl.refine_schema import REFIT, blocks_per_step, heal_split

TOP_K = 64  # worker/engine/refine/heal.TOP_K


def refine_token_layers(
    num_samples: int, seq_len: int, layers: int, ks, refit: str, heal, head_layers: float, guard_blocks: int = 0
) -> float:
    """The stage's work in token-layers (an LM-head pass counts `head_layers` layers), over every output;
    `guard_blocks`: the heal's guard (guard_blocks())."""
    ks = list(ks) or [1]
    total = 0.0
    if refit != REFIT:
        total += sum(num_samples * seq_len * (layers + k) for k in ks)
    if heal is not None:
        n_train, n_held = heal_split(heal.tokens, seq_len)
        steps = heal.steps or n_train
        per_pass = seq_len * (layers + head_layers)
        total += n_train * per_pass  # the teacher, once
        total += len(ks) * (3 * steps * blocks_per_step(n_train, steps) + 2 * (n_held + guard_blocks)) * per_pass
    return total


def guard_blocks(calibration, selection) -> int:
    """Blocks of the heal's guard (worker/engine/refine/stage.Refiner.guard): the selection dataset's, when the
    recipe gives one that is not the calibration's (dataset, config, split and text field), else none."""
    if selection is None:
        return 0
    same = (selection.dataset, selection.config, selection.split, selection.text_field) == (
        calibration.dataset,
        calibration.config,
        calibration.split,
        calibration.text_field,
    )
    return 0 if same else selection.num_samples


def heal_bytes(
    hidden: int,
    intermediate: int,
    layers: int,
    vocab: int,
    seq_len: int,
    heal,
    ks,
    dtype_bytes: int,
    mlp_bytes: int | None = None,
) -> int:
    """Memory healing adds beside the whole model: one block's activations kept for the backward (every layer
    keeps ~(8 d + 3 I) per token, as model.ACT_WIDTHS_D counts a forward; nothing is recomputed, so a deep model
    heals short blocks best), one block's logits in float32 with their softmax and gradient, the maps' training
    state, and the teacher's targets. `mlp_bytes`: the MLP's share of a token's activations (Shape.mlp_act_bytes:
    a mixture of experts' routed experts); None: a dense MLP's 3 I."""
    if heal is None:
        return 0
    k = max(ks or [1])
    n_train, _ = heal_split(heal.tokens, seq_len)
    mlp = 3 * intermediate * dtype_bytes if mlp_bytes is None else mlp_bytes
    acts = layers * seq_len * (8 * hidden * dtype_bytes + mlp)
    logits = 3 * seq_len * vocab * 4
    maps = 4 * k * hidden * hidden * 4
    targets = n_train * (seq_len - 1) * TOP_K * (4 + 8)
    return acts + logits + maps + targets
