"""The selection data's mean next-token loss with a SET of layers replaced together.

Measured selection (greedy.py, auto_k.py) asks this for many sets. Each set's loss needs the model only
from its first replaced layer on: the base model's hidden states at that layer's input are the same for
every set that starts there. So the base hidden states at a layer's input are cached, per batch, the first
time a set starts there, and a set then runs from min(set) through the last layer, with its layers replaced, then the
final norm and LM head. A set starting at layer s costs (L - s) layer passes over the selection blocks
instead of L.

Host memory: one copy of the selection blocks' hidden states per layer a set started at (a selection set of 64 x 512
tokens on a d=576 model: 75 MB per start layer, in the model's dtype).
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch

from .activations import HiddenCache
from .calibrate import first_pass
from .layer_source import as_source
from .loss_probe import layer_output, replaced_layer
from .scores import LinearMap


class SetLoss:
    """`loss(layers)`: mean next-token loss on `blocks` with `layers` replaced (maps from `maps(i)`, nbl only);
    `base`: the unmodified model's. Results are memoised by set; the base hidden states at a layer's input are
    computed when a set first starts there, from the nearest cached layer below, and kept."""

    @torch.no_grad()
    def __init__(self, model, blocks: torch.Tensor, mode: str, method: str,
                 maps: Callable[[int], LinearMap] | dict | None, batch_size: int = 1, device=None):
        self.source = as_source(model)
        self.device = torch.device(device) if device is not None else self.source.device
        self.blocks, self.mode, self.method = blocks, mode, method
        self._get_map = maps.__getitem__ if isinstance(maps, dict) else maps
        self._maps: dict[int, LinearMap] = {}
        self.n_layers = self.source.config.num_hidden_layers
        n = blocks.shape[0]
        self.batches = [(s, min(s + batch_size, n), "sel") for s in range(0, n, batch_size)]
        self.tokens = int(blocks[:, 1:].numel())
        self.memo: dict[tuple[int, ...], float] = {}
        with HiddenCache(None, None) as cache:
            self.kwargs = first_pass(self.source, blocks, self.batches, self.device, cache)
            self.inputs = {0: [cache.pop(b).cpu() for b in range(len(self.batches))]}  # layer -> base inputs
        self.source.release_stem()
        self.base = self._head_loss(self._run(self.inputs[0], 0, self.n_layers, ()))

    def fmap(self, i: int) -> LinearMap | None:
        if self.method != "nbl":
            return None
        if i not in self._maps:
            self._maps[i] = self._get_map(i)
        return self._maps[i]

    @torch.no_grad()
    def __call__(self, layers: Iterable[int]) -> float:
        key = tuple(sorted(set(layers)))
        if not key:
            return self.base
        if key not in self.memo:
            start = key[0]
            self.memo[key] = self._head_loss(self._run(self._input_at(start), start, self.n_layers, key))
        return self.memo[key]

    def _input_at(self, layer: int) -> list[torch.Tensor]:
        if layer not in self.inputs:
            below = max(i for i in self.inputs if i < layer)
            self.inputs[layer] = [h.cpu() for h in self._run(self.inputs[below], below, layer, ())]
        return self.inputs[layer]

    def _run(self, hidden: list[torch.Tensor], lo: int, hi: int, replaced: tuple[int, ...]) -> list[torch.Tensor]:
        """Layers lo..hi-1 over every batch, those in `replaced` replaced."""
        hidden, d = list(hidden), self.source.config.hidden_size
        for i in range(lo, hi):
            layer = self.source.layer(i, self.device)
            try:
                for b, h in enumerate(hidden):
                    h, kw = h.to(self.device), self.kwargs[b][i]
                    if i in replaced:
                        with replaced_layer(layer, i, d, self.mode, self.method, self.fmap(i)) as rep:
                            hidden[b] = layer_output(rep(h, **kw))
                    else:
                        hidden[b] = layer_output(layer(h, **kw))
            finally:
                self.source.release(i)
        return hidden

    def _head_loss(self, hidden: list[torch.Tensor]) -> float:
        norm, lm_head = self.source.head(self.device)
        try:
            total, count = 0.0, 0
            for (lo, hi, _), h in zip(self.batches, hidden):
                logits = lm_head(norm(h.to(self.device)))[:, :-1].float()
                target = self.blocks[lo:hi, 1:].to(self.device)
                total += float(torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="sum"))
                count += target.numel()
        finally:
            self.source.release_head()
        return total / count
