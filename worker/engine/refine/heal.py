"""Healing: the replacement maps (W, b) trained against the base model's next-token distribution.

Everything but the maps stays frozen. The loss is the KL divergence from the teacher (the base model) to the
student (the compressed model) on the teacher's top-K tokens of each position, the teacher's probabilities
renormalised over them:

    p̂ = softmax(top-K teacher logits)           (B, T-1, K), computed once per run and kept (TeacherTargets)
    log q = log_softmax(student logits)[top-K]   the student normalised over the whole vocabulary
    KL = Σ_K p̂ (log p̂ - log q), mean over positions

K = 64 keeps essentially all of a small model's next-token mass and costs (T-1)·K·(4 + 8) bytes a block, not
(T-1)·V·4. Training text is calibration text the fit never saw (refine/stage.py takes the blocks after the
calibration's); a tenth of it (at least one block) is held out, and its perplexity is measured before and
after. Should healing raise it, the maps before healing are kept (`kept` False): healing never publishes a
worse model on its own held-out text.

That held-out text is the healing text's own domain, so it cannot see a heal that learns that domain at the cost
of others (SmolLM2 attn k=8, 231 steps at 1e-4: held-out C4 74.7 -> 60.0, WikiText-2 32.9 -> 34.8). A `guard` (the
job's selection dataset, when it is not the calibration's: refine/stage.py) is measured before and after too, and
the healed maps are kept only if neither perplexity rose.

Each step averages the gradient of ⌈training blocks / steps⌉ blocks (refine_schema.blocks_per_step), so the
steps cover the training text once, and the rate falls from lr to 0 on a cosine over the steps. Measured on
SmolLM2, Attn k=8 (docs/quality.md): one or two blocks a step at a constant 1e-4, 2e-5 or 1e-5 raised the
held-out perplexity every time, Adam's near-sign first steps on so short a gradient being mostly noise; four
blocks a step, 1e-5, cosine, lowered it (74.7 -> 69.0 on 65k tokens).

The maps train in float32 whatever the model's dtype (Adam's updates vanish in bfloat16). Memory: the whole
compressed model (the only stage that holds it; estimates count it), one block's activations for the backward
from the first replaced layer on, and Adam's two moments of the maps (2·k·d² floats).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from nbl.refine_schema import blocks_per_step
from worker.engine.forms.surgery import Plan, replaced
from worker.engine.scoring.likelihood import nll_sum
from worker.engine.scoring.scores import LinearMap

TOP_K = 64


@dataclass
class TeacherTargets:
    """The base model's top-K next-token logits on each training block."""

    values: torch.Tensor  # (blocks, T-1, K) float32 logits
    indices: torch.Tensor  # (blocks, T-1, K) int64 token ids


@dataclass
class Healed:
    maps: dict[int, LinearMap]  # the trained maps, or the ones given when healing did not help (kept False)
    steps: int
    tokens: int  # training tokens seen (steps x blocks a step x block length)
    seconds: float
    ppl_before: float  # held-out perplexity of the compressed model before and after
    ppl_after: float
    kept: bool  # the trained maps were kept (they lowered, or held, the held-out and the guard's perplexity)
    losses: list[float]
    guard_before: float | None = None  # the guard's perplexity before and after (None: no guard)
    guard_after: float | None = None

    def record(self) -> dict:
        guard = (
            {}
            if self.guard_before is None
            else {
                "guard_perplexity_before": round(self.guard_before, 4),
                "guard_perplexity_after": round(self.guard_after, 4),
            }
        )
        return {
            "steps": self.steps,
            "tokens": self.tokens,
            "seconds": round(self.seconds, 3),
            "perplexity_before": round(self.ppl_before, 4),
            "perplexity_after": round(self.ppl_after, 4),
            **guard,
            "kept": self.kept,
            "loss_first": round(self.losses[0], 5) if self.losses else None,
            "loss_last": round(self.losses[-1], 5) if self.losses else None,
        }


def kl_top_k(student_logits: torch.Tensor, values: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """Mean over positions of KL(p̂ ‖ q) on the teacher's top-K tokens: student_logits (B, T, V), values and
    indices (B, T, K); p̂ = softmax(values), q the student's full-vocabulary distribution."""
    log_q = torch.log_softmax(student_logits.float(), dim=-1).gather(-1, indices)  # (B, T, K)
    log_p = torch.log_softmax(values.float(), dim=-1)  # (B, T, K)
    return (log_p.exp() * (log_p - log_q)).sum(-1).mean()


@torch.no_grad()
def teacher_targets(
    model, blocks: torch.Tensor, top_k: int = TOP_K, on_block: Callable[[int, int], None] | None = None
) -> TeacherTargets:
    """The base model's top-K logits at each position but the last of each block, one block at a time;
    `on_block(done, total)` after each (it may raise to cancel)."""
    vals, idxs = [], []
    device = next(model.parameters()).device
    for b in range(blocks.shape[0]):
        logits = model(input_ids=blocks[b : b + 1].to(device), use_cache=False).logits[:, :-1]  # (1, T-1, V)
        top = torch.topk(logits.float(), min(top_k, logits.shape[-1]), dim=-1)
        vals.append(top.values.cpu())
        idxs.append(top.indices.cpu())
        if on_block is not None:
            on_block(b + 1, blocks.shape[0])
    return TeacherTargets(torch.cat(vals), torch.cat(idxs))


@torch.no_grad()
def perplexity(model, blocks: torch.Tensor) -> float:
    """exp(mean next-token loss) over `blocks` (each token predicted from its block's earlier ones)."""
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for b in range(blocks.shape[0]):
        ids = blocks[b : b + 1].to(device)
        nll, n = nll_sum(model, ids)  # the head a chunk of positions at a time
        total, count = total + nll, count + n
    return math.exp(total / count)


class Float32Linear(nn.Module):
    """y = W x + b with W, b trained in float32; input and output in the model's dtype."""

    def __init__(self, fmap: LinearMap, device):
        super().__init__()
        self.weight = nn.Parameter(fmap.weight.to(device=device, dtype=torch.float32).clone())
        self.bias = nn.Parameter(fmap.bias.to(device=device, dtype=torch.float32).clone())

    def forward(self, x):
        return nn.functional.linear(x.float(), self.weight, self.bias).to(x.dtype)


def _holder(model, plan: Plan, i: int) -> nn.Module:
    """The module whose `.linear` is layer i's map (modeling_nbl.NBLAttention or NBLBlock)."""
    layer = model.model.layers[i]
    return layer.self_attn if plan.mode == "attn" else layer


def heal(
    model,
    plan: Plan,
    maps: dict[int, LinearMap],
    train: torch.Tensor,
    held: torch.Tensor,
    targets: TeacherTargets,
    *,
    steps: int | None = None,
    lr: float = 1e-4,
    max_seconds: float | None = None,
    on_step: Callable[[int, int, float], None] | None = None,
    guard: torch.Tensor | None = None,
) -> Healed:
    """Train the plan's maps in `model` (the base, in memory; restored after) on the `train` blocks against
    `targets` (teacher_targets of the same blocks) for `steps` (default: one a block) or until `max_seconds`,
    each step on the next ⌈blocks / steps⌉ blocks, round-robin, the rate on a cosine from `lr` to 0; the
    perplexity on `held` (and on `guard`, blocks of other text, when given) before and after; the trained maps are
    kept only if neither rose. `on_step(blocks done, blocks in all, the step's mean loss so far)`
    after each block (it may raise to cancel)."""
    if plan.method != "nbl" or plan.form != "nbl":
        raise ValueError(f"heal trains nbl's maps, not method {plan.method!r} form {plan.form!r}")
    steps = train.shape[0] if steps is None else steps
    batch = blocks_per_step(train.shape[0], steps)
    t0 = time.perf_counter()
    frozen = {p: p.requires_grad for p in model.parameters()}
    losses: list[float] = []
    try:
        for p in frozen:
            p.requires_grad_(False)
        with replaced(model, plan, maps):
            trained = {}
            for i in plan.layers:
                holder = _holder(model, plan, i)
                trained[i] = Float32Linear(maps[i], holder.linear.weight.device)
                holder.linear = trained[i]
            before = perplexity(model, held)
            guard_before = None if guard is None else perplexity(model, guard)
            opt = torch.optim.Adam([p for m in trained.values() for p in m.parameters()], lr=lr)
            schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * s / steps)))
            device = next(iter(trained.values())).weight.device
            seen, out_of_time = 0, False
            for s in range(steps):
                opt.zero_grad(set_to_none=True)
                total = 0.0
                for j in range(batch):  # one block at a time: the activations of one block held for the backward
                    b = (s * batch + j) % train.shape[0]
                    logits = model(input_ids=train[b : b + 1].to(device), use_cache=False).logits[:, :-1]
                    loss = (
                        kl_top_k(
                            logits,
                            targets.values[b : b + 1].to(logits.device),
                            targets.indices[b : b + 1].to(logits.device),
                        )
                        / batch
                    )
                    loss.backward()
                    total += float(loss.detach())
                    seen += 1
                    # per block, not per step: a step may average thousands of blocks, and the time bound and a
                    # cancel (raised by on_step) must not wait for it; a step cut short steps on what it has
                    if on_step is not None:
                        on_step(seen, steps * batch, total * batch / (j + 1))
                    out_of_time = max_seconds is not None and time.perf_counter() - t0 >= max_seconds
                    if out_of_time:
                        total = total * batch / (j + 1)
                        break
                opt.step()
                schedule.step()
                losses.append(total)
                if out_of_time:
                    break
            after = perplexity(model, held)
            guard_after = None if guard is None else perplexity(model, guard)
            new = {
                i: LinearMap(m.weight.detach().double().cpu(), m.bias.detach().double().cpu(), maps[i].ridge)
                for i, m in trained.items()
            }
    finally:
        for p, flag in frozen.items():
            p.requires_grad_(flag)
    kept = after <= before and (guard is None or guard_after <= guard_before)
    return Healed(
        maps=new if kept else dict(maps),
        steps=len(losses),
        tokens=seen * int(train.shape[1]),
        seconds=time.perf_counter() - t0,
        ppl_before=before,
        ppl_after=after,
        kept=kept,
        losses=losses,
        guard_before=guard_before,
        guard_after=guard_after,
    )
