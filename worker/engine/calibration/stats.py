"""Streaming first and second moments of each decoder layer's input and branch outputs.

For a layer with input h (the residual stream, N tokens x d), attention branch a = Attn(LN1 h) and
block output h'', calibration needs, for both NBL modes at once:

    x = h                      shared regressor of both modes
    y_attn  = a                attention branch
    y_block = h'' - h          whole-block branch

and keeps n, Σx, Σxxᵀ, and per branch Σy, Σyyᵀ, Σyxᵀ, plus Σ cos(h, h + y) for the DROP baselines.
These sums are all LMMSE, CCA and NMSE need (scores.py); activations are never stored.
Calibration keeps only the branches (modes) it was asked for.

Numerics: every sum is kept in float64. Each batch's products are formed in `product_dtype`
(float32 by default, float64 on request) about a fixed shift, the first batch's mean, then added
into the float64 totals. Shifting removes the large common mean of the residual stream (massive
activations) before the float32 products, so the covariance E[xxᵀ] - μμᵀ suffers no cancellation;
tests check these sums against a float64 reference.

The last `holdout` blocks go to a second set of sums, so a map fitted on the rest can be scored on
data it has not seen. Totals are the two sets added. Σyyᵀ is the one matrix neither split needs on
its own: fitting a map needs Σx, Σxxᵀ, Σy, Σyxᵀ, and scoring it on held-out data needs only tr Σyyᵀ
(scores.residual_mse). So each split keeps Σ‖y‖² = tr Σyyᵀ, and the matrix Σyyᵀ is kept once, over
all blocks, for the scores of the whole calibration: five d x d matrices per layer and mode, not six.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from worker.engine.calibration.host_memory import off_heap_zeros
from worker.engine.calibration.products import add_upper, cross, gram, mirror_upper, tf32_matmuls

BRANCHES = ("attn", "block")
SPLITS = ("fit", "held")
FIELDS = ("y", "yy_tr", "yx", "cos")  # of BranchSums


@dataclass
class BranchSums:
    """Σy, tr Σyyᵀ, Σyxᵀ and Σcos(x, x+y) of one branch of one layer, for one split."""

    y: torch.Tensor  # (d,)
    yy_tr: torch.Tensor  # () Σ‖y‖², the trace of Σyyᵀ
    yx: torch.Tensor  # (d, d)
    cos: torch.Tensor  # ()


@dataclass
class SplitSums:
    """The sums of one layer over one split of the calibration blocks."""

    n: torch.Tensor  # () token count, float64
    x: torch.Tensor  # (d,)
    xx: torch.Tensor  # (d, d)
    branches: dict[str, BranchSums] = field(default_factory=dict)

    @classmethod
    def zeros(cls, d: int, device, branches=BRANCHES) -> SplitSums:
        z = lambda *s: off_heap_zeros(s, torch.float64, device)  # noqa: E731  (host_memory.py: why)
        return cls(
            n=z(),
            x=z(d),
            xx=z(d, d),
            branches={b: BranchSums(y=z(d), yy_tr=z(), yx=z(d, d), cos=z()) for b in branches},
        )

    def __add__(self, other: SplitSums) -> SplitSums:
        return SplitSums(
            n=self.n + other.n,
            x=self.x + other.x,
            xx=self.xx + other.xx,
            branches={
                b: BranchSums(*(getattr(s, f) + getattr(other.branches[b], f) for f in FIELDS))
                for b, s in self.branches.items()
            },
        )


@dataclass
class LayerStats:
    """All sums of one decoder layer: a shift per variable, one SplitSums per split, and Σyyᵀ over all blocks."""

    shift_x: torch.Tensor  # (d,) the origin the sums are taken about
    shift_y: dict[str, torch.Tensor]  # branch -> (d,)
    splits: dict[str, SplitSums]
    yy: dict[str, torch.Tensor]  # branch -> (d, d) Σyyᵀ over both splits
    # form fold, block mode: lag r -> (d, d) Σ ỹ x̃_rᵀ over both splits, ỹ this layer's block change about
    # its shift, x̃_r the MLP output r layers back about the shift of the layer that regressed on it
    # (form_taps.py); a run of consecutive blocks fits one map from these (fold_runs.py)
    lag: dict[int, torch.Tensor] = field(default_factory=dict)

    @property
    def branches(self) -> tuple[str, ...]:
        """The modes these sums cover: only those calibration was asked for."""
        return tuple(b for b in BRANCHES if b in self.shift_y)

    def total(self) -> SplitSums:
        return self.splits["fit"] + self.splits["held"]

    def sums(self) -> list[torch.Tensor]:
        """Every float64 sum (not the shifts): what data-parallel calibration adds across processes."""
        out = [*self.yy.values(), *self.lag.values()]
        for s in self.splits.values():
            out += [s.n, s.x, s.xx] + [getattr(bs, f) for bs in s.branches.values() for f in FIELDS]
        return out

    # --- (de)serialisation to a flat {name: tensor} dict, for safetensors ---------------------
    def to_flat(self, prefix: str) -> dict[str, torch.Tensor]:
        out = {f"{prefix}.shift_x": self.shift_x}
        out.update({f"{prefix}.shift_{b}": t for b, t in self.shift_y.items()})
        out.update({f"{prefix}.yy_{b}": t for b, t in self.yy.items()})
        out.update({f"{prefix}.lag_{r}": t for r, t in self.lag.items()})
        for split, s in self.splits.items():
            p = f"{prefix}.{split}"
            out.update({f"{p}.n": s.n, f"{p}.x": s.x, f"{p}.xx": s.xx})
            for b, bs in s.branches.items():
                out.update({f"{p}.{b}.{f}": getattr(bs, f) for f in FIELDS})
        return {k: v.detach().cpu().contiguous() for k, v in out.items()}

    @classmethod
    def from_flat(cls, flat: dict[str, torch.Tensor], prefix: str) -> LayerStats:
        branches = [b for b in BRANCHES if f"{prefix}.shift_{b}" in flat]
        splits = {}
        for split in SPLITS:
            p = f"{prefix}.{split}"
            splits[split] = SplitSums(
                n=flat[f"{p}.n"],
                x=flat[f"{p}.x"],
                xx=flat[f"{p}.xx"],
                branches={b: BranchSums(*(flat[f"{p}.{b}.{f}"] for f in FIELDS)) for b in branches},
            )
        return cls(
            shift_x=flat[f"{prefix}.shift_x"],
            shift_y={b: flat[f"{prefix}.shift_{b}"] for b in branches},
            splits=splits,
            yy={b: flat[f"{prefix}.yy_{b}"] for b in branches},
            lag={int(k[len(prefix) + 5 :]): t for k, t in flat.items() if k.startswith(f"{prefix}.lag_")},
        )


_SCRATCH: dict[tuple, torch.Tensor] = {}


def _scratch(d: int, dtype: torch.dtype, device) -> torch.Tensor:
    """One (d, d) buffer for the per-batch products, shared by all layers. Fresh d x d temporaries
    (a float32 product, then its float64 copy) for 5 products x every layer x every batch fragment
    glibc's heap: on SmolLM2 that cost ~0.7 GB of peak RSS on top of the 0.8 GB of sums."""
    key = (d, dtype, str(device))
    buf = _SCRATCH.get(key)
    if buf is None:
        buf = _SCRATCH[key] = torch.empty(d, d, dtype=dtype, device=device)
    return buf


class LayerAccumulator:
    """Adds one batch at a time into a LayerStats; holds nothing but the sums, and only those of the
    `branches` (modes) asked for: x's sums are shared, each branch adds Σy, Σyyᵀ, Σyxᵀ and Σcos."""

    def __init__(
        self, d: int, device, product_dtype: torch.dtype = torch.float32, branches=BRANCHES, tf32: bool = False, lags=()
    ):
        self.d = d
        self.device = device
        self.product_dtype = product_dtype
        self.tf32 = tf32  # float32 products on TF32 tensor cores (a GPU; resolve_products)
        self.branches = tuple(branches)
        self._stats: LayerStats | None = None
        # Σxxᵀ and Σyyᵀ are added on their upper blocks only (no per-batch mirror copies, 10/16 of the
        # float64 additions); reading `stats` mirrors them whole.
        self._mirrored = True
        # Allocated now, before any forward pass, and on the host each in its own mapping, not in the
        # heap between the batches' activations (host_memory.py; from the heap at the first batch they
        # cost +0.9 GB of peak RSS on SmolLM2).
        self._zeros = {s: SplitSums.zeros(d, device, self.branches) for s in SPLITS}
        self._yy = {b: off_heap_zeros((d, d), torch.float64, device) for b in self.branches}
        self._lag = {r: off_heap_zeros((d, d), torch.float64, device) for r in lags}

    def shift_of(self, x: torch.Tensor, ys: dict[str, torch.Tensor]) -> torch.Tensor:
        """The first batch's means in float64, [x, then each branch], as one (d * (1 + branches),)
        vector: the origin later batches are centred on (several processes share rank 0's)."""
        return torch.cat([x.double().mean(0)] + [ys[b].double().mean(0) for b in self.branches])

    def start(self, shift: torch.Tensor) -> None:
        """Take the sums about `shift` (shift_of's layout) from now on."""
        parts = [p.clone() for p in shift.split(self.d)]  # separate tensors: safetensors refuses shared storage
        self._stats = LayerStats(
            shift_x=parts[0],
            shift_y=dict(zip(self.branches, parts[1:])),
            splits=self._zeros,
            yy=self._yy,
            lag=self._lag,
        )
        del self._zeros, self._yy, self._lag

    @property
    def stats(self) -> LayerStats | None:
        """The sums so far (None before the first batch), the symmetric ones made whole."""
        if self._stats is not None and not self._mirrored:
            for total in [sp.xx for sp in self._stats.splits.values()] + list(self._stats.yy.values()):
                mirror_upper(total)
            self._mirrored = True
        return self._stats

    @torch.no_grad()
    def add(
        self,
        h: torch.Tensor,
        ys: dict[str, torch.Tensor],
        split: str,
        stream: torch.Tensor | None = None,
        lags: dict[int, torch.Tensor] | None = None,
    ) -> None:
        """h: (N, d) regressors (the layer inputs, for nbl); ys: branch -> (N, d) branch outputs; split: 'fit'
        or 'held'; stream: the residual stream the DROP cosine is taken on (default h); lags: r -> (N, d)
        earlier regressors, already about their own shifts, crossed with the one branch (form fold)."""
        with tf32_matmuls(self.tf32 and h.is_cuda):
            self._add(h, {b: ys[b] for b in self.branches}, split, h if stream is None else stream, lags or {})

    def _add(
        self,
        h: torch.Tensor,
        ys: dict[str, torch.Tensor],
        split: str,
        stream: torch.Tensor,
        lags: dict[int, torch.Tensor],
    ) -> None:
        if self._stats is None:
            self.start(self.shift_of(h, ys))
        st, dt = self._stats, self.product_dtype
        self._mirrored = False
        s = st.splits[split]
        x = h.to(dt) - st.shift_x.to(dt)  # (N, d)
        prod = _scratch(self.d, dt, x.device)  # (d, d), reused by every layer and batch
        s.n += h.shape[0]
        s.x += x.sum(0, dtype=torch.float64)
        add_upper(s.xx, gram(x, prod, mirror=False))  # symmetric: the lower blocks when read (stats)
        for b, y_raw in ys.items():
            y = y_raw.to(dt) - st.shift_y[b].to(dt)  # (N, d)
            bs = s.branches[b]
            bs.y += y.sum(0, dtype=torch.float64)
            add_upper(st.yy[b], gram(y, prod, mirror=False))
            bs.yy_tr += torch.diagonal(prod).sum(dtype=torch.float64)
            bs.yx += cross(y, x, prod)
            for r, xr in lags.items():
                st.lag[r] += cross(y, xr.to(dt), prod)
            # DROP baseline: cosine between the stream before and after the branch is added.
            hf = stream.float()
            bs.cos += torch.nn.functional.cosine_similarity(hf, hf + y_raw.float(), dim=-1).sum(dtype=torch.float64)

    def nbytes(self) -> int:
        """Bytes of float64 sums this layer holds (the same whether or not a batch has arrived)."""
        d, nb = self.d, len(self.branches)
        per_split = 1 + d + d * d + nb * (d + 1 + d * d + 1)
        return 8 * (
            len(SPLITS) * per_split
            + (nb + len(self._lag if self._stats is None else self._stats.lag)) * d * d
            + (1 + nb) * d
        )
