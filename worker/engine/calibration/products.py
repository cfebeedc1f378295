"""The per-batch products of calibration (stats.py): Σxxᵀ and Σyyᵀ from the blocks on and above the
diagonal, Σyxᵀ whole, and the precision they are formed in. Sums stay float64 in stats.py; these are the
float32 (or TF32, or float64) matrix products each batch adds to them."""

from __future__ import annotations

from contextlib import contextmanager

import torch

PRODUCTS = ("auto", "float32", "tf32", "float64")


def resolve_products(name: str, device) -> str:
    """The per-batch products' precision. `auto`: TF32 on a GPU, whose worst relative CCA-bound error against
    float64 products was 2.2e-5 on SmolLM2 (bench/results/product_precision.md; the issue's bound is 1e-4),
    float32 on the CPU (TF32 is a GPU format)."""
    if name not in PRODUCTS:
        raise ValueError(f"product precision must be one of {', '.join(PRODUCTS)}, got {name!r}")
    if name == "auto":
        return "tf32" if str(device).startswith("cuda") else "float32"
    return name


@contextmanager
def tf32_matmuls(on: bool):
    """TF32 for CUDA float32 matmuls inside the block (torch's global flag, restored after)."""
    if not on:
        yield
        return
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def gram_blocks(d: int) -> int:
    """Column blocks for gram(): ~4 blocks of >= 128 columns. At 1 CPU thread, N = 2,048 tokens, xᵀx took
    10.6 ms whole vs 5.5 ms in 4 blocks at d=576, 29.3 vs 20.9 ms at d=1024, 262 vs 220 ms at d=4096."""
    return max(1, min(4, d // 128))


def band_edges(d: int) -> list[int]:
    """The column edges of gram()'s blocks."""
    blocks = gram_blocks(d)
    return [d * i // blocks for i in range(blocks + 1)]


def gram(x: torch.Tensor, out: torch.Tensor, mirror: bool = True) -> torch.Tensor:
    """xᵀx into `out` (d, d), computing only the blocks on and above the diagonal (10 of 16 for 4 blocks)
    and mirroring the rest: the product is symmetric, so most of its lower half need not be multiplied.
    The result is exactly symmetric, as xᵀx is. `mirror=False` leaves the blocks below the diagonal
    unwritten, for a caller that adds only the upper ones (add_upper) and mirrors its total once."""
    edges = band_edges(x.shape[1])
    xt = x.T
    for a, b in zip(edges, edges[1:]):
        torch.mm(xt[a:b], x[:, a:], out=out[a:b, a:])  # row band a:b from the diagonal on
    if mirror:
        mirror_upper(out)
    return out


def add_upper(total: torch.Tensor, prod: torch.Tensor) -> None:
    """total += prod on gram()'s blocks on and above the diagonal only (the float64 sums of a symmetric
    product: the lower blocks are mirrored from the total when it is read, mirror_upper)."""
    edges = band_edges(total.shape[0])
    for a, b in zip(edges, edges[1:]):
        total[a:b, a:] += prod[a:b, a:]


def mirror_upper(total: torch.Tensor) -> None:
    """Write `total`'s lower triangle from its upper one: gram()'s blocks below the diagonal, and the lower
    halves of the diagonal blocks, which a matrix product need not make exactly symmetric (on some CPUs'
    kernels (i, j) and (j, i) are summed in different orders). The result is exactly symmetric, and the
    same bits as mirroring each batch's product before adding it (each entry is the same sum in the same order)."""
    edges = band_edges(total.shape[0])
    for a, b in zip(edges, edges[1:]):
        if a:
            total[a:b, :a].copy_(total[:a, a:b].T)
        diag = total[a:b, a:b]
        diag.copy_(torch.triu(diag) + torch.triu(diag, 1).T)


def cross(y: torch.Tensor, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """yᵀx into `out` (d, d). With gram(), the two products a batch is made of (bench/product_precision.py
    substitutes both to measure other product precisions)."""
    return torch.mm(y.T, x, out=out)
