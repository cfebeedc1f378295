"""The selection data's mean next-token loss with a SET of layers replaced together.

Measured selection (greedy.py, auto_k.py) asks this for many sets. A set's loss needs the model only from its
first *changed* layer on: the hidden states entering that layer are the same for every set that agrees with it
below. They are kept in a PrefixCache (prefix_cache.py):
- the base model's states at a layer's input, cached the first time a set starts there (a set starting at
  layer s costs L - s layer passes instead of L);
- `warm(parent, layers)`: the states entering each of `layers` with `parent`'s replacements below it. A greedy
  step's candidates are the chosen set plus one layer c: run from c on that, each costs L - c layer passes
  instead of L - min(chosen).

Losses are kept per block (one selection sequence), per batch as computed: `per_block(layers, n)` scores the
first n batches only, so racing candidates (race.py) can stop one that cannot win before the rest of the
blocks are run. `__call__` is the mean over every block (each block has the same token count). The paired
per-block differences with the base give the standard error of a set's perplexity rise (nbl/selection/rise_error.py).

Host memory: one copy of the selection blocks' hidden states per base entry (a selection set of 64 x 512 tokens
on a d=576 model: 75 MB per start layer, in the model's dtype), plus the prefix entries, within `prefix_bytes`,
plus one batch through a layer and one chunk of the head's logits (nbl/sizing/head.py).
Every state is computed without autograd: warm() is called outside per_block's no_grad, and its states once held
every layer's saved activations (a Qwen2.5-0.5B-shaped greedy was killed at 22.3 GB).
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch

from nbl.selection.sets import PREFIX_CACHE_BYTES
from nbl.sizing.head import head_chunk
from worker.engine.calibration.activations import HiddenCache
from worker.engine.calibration.calibrate import first_pass
from worker.engine.calibration.layer_source import as_source, head_logits
from worker.engine.scoring.likelihood import token_nll
from worker.engine.scoring.scores import LinearMap
from worker.engine.selection.loss_probe import layer_output, replaced_layer
from worker.engine.selection.prefix_cache import PrefixCache


class SetLoss:
    """`loss(layers)`: mean next-token loss on `blocks` with `layers` replaced (maps from `maps(i)`, nbl only);
    `base`: the unmodified model's. Per-block losses are memoised by set and batch."""

    @torch.no_grad()
    def __init__(
        self,
        model,
        blocks: torch.Tensor,
        mode: str,
        method: str,
        maps: Callable[[int], LinearMap] | dict | None,
        batch_size: int = 1,
        device=None,
        prefix_bytes: int | None = PREFIX_CACHE_BYTES,
    ):
        self.source = as_source(model)
        self.device = torch.device(device) if device is not None else self.source.device
        self.blocks, self.mode, self.method = blocks, mode, method
        self._get_map = maps.__getitem__ if isinstance(maps, dict) else maps
        self._maps: dict[int, LinearMap] = {}
        self.n_layers = self.source.config.num_hidden_layers
        n = blocks.shape[0]
        self.batches = [(s, min(s + batch_size, n), "sel") for s in range(0, n, batch_size)]
        self.tokens = int(blocks[:, 1:].numel())
        self.memo: dict[tuple[int, ...], float] = {}  # set -> mean loss over every block
        self.rows: dict[tuple[int, ...], dict[int, torch.Tensor]] = {}  # set -> batch -> per-block mean loss
        self.layer_passes = 0  # (layer, batch) forward passes run: what measured selection costs
        self.on_set: Callable[[int], None] | None = None  # called with the count of sets scored, at each new one
        self.cache = PrefixCache(prefix_bytes)
        with HiddenCache(None, None) as cache:
            self.kwargs = first_pass(self.source, blocks, self.batches, self.device, cache)
            self.cache.put(((), 0), [cache.pop(b).cpu() for b in range(len(self.batches))])
        self.source.release_stem()
        self.base = self(())

    @property
    def inputs(self) -> dict[int, list[torch.Tensor]]:
        """The base model's cached states by layer (the layers a set started at)."""
        return self.cache.base

    def fmap(self, i: int) -> LinearMap | None:
        if self.method != "nbl":
            return None
        if i not in self._maps:
            self._maps[i] = self._get_map(i)
        return self._maps[i]

    def __call__(self, layers: Iterable[int]) -> float:
        key = tuple(sorted(set(layers)))
        if key not in self.memo:
            self.memo[key] = float(self.per_block(key).mean())
        return self.memo[key]

    @torch.no_grad()
    def per_block(self, layers: Iterable[int], n_batches: int | None = None) -> torch.Tensor:
        """(blocks of the first n_batches,) float64: each block's mean next-token loss with `layers` replaced."""
        key = tuple(sorted(set(layers)))
        n_batches = len(self.batches) if n_batches is None else n_batches
        new = key not in self.rows
        done = self.rows.setdefault(key, {})
        if new and self.on_set is not None:
            self.on_set(len(self.rows))
        todo = [b for b in range(n_batches) if b not in done]
        if todo:
            start = self._start(key)
            states = self.cache.get(start)
            hidden = self._run({b: states[b] for b in todo}, start[1], self.n_layers, key)
            done.update(self._head_losses(hidden))
        return torch.cat([done[b] for b in range(n_batches)])

    @torch.no_grad()  # the greedy calls it outside per_block: its states must not keep the layers' autograd graph
    def warm(self, parent: Iterable[int], layers: Iterable[int]) -> None:
        """Cache the states entering each of `layers` with `parent`'s replacements below it: the sets `parent`
        plus one of `layers` then run from that layer on."""
        parent = tuple(sorted(set(parent)))
        wanted = sorted({j for j in layers if any(i < j for i in parent)})  # else the base entry serves
        wanted = [j for j in wanted if (tuple(i for i in parent if i < j), j) not in self.cache]
        if not wanted:
            return
        start = self._start(parent, limit=wanted[0])
        self._run(dict(enumerate(self.cache.get(start))), start[1], wanted[-1], parent, taps=wanted)

    def _start(self, key: tuple[int, ...], limit: int | None = None) -> tuple[tuple[int, ...], int]:
        """The deepest cached entry for `key` (at or below `limit`); a base entry below key's first layer is
        carried up to it first (and kept: the next set starting there reuses it), as before prefixes were kept."""
        start = self.cache.best_start(key, limit)
        first = key[0] if key else self.n_layers
        target = min(first, limit) if limit is not None else first
        if not start[0] and start[1] < target and target < self.n_layers:
            below = self.cache.get(start)
            hidden = self._run(dict(enumerate(below)), start[1], target, ())
            self.cache.put(((), target), [hidden[b] for b in range(len(below))])
            start = ((), target)
        return start

    @torch.no_grad()
    def _run(
        self,
        hidden: dict[int, torch.Tensor],
        lo: int,
        hi: int,
        replaced: tuple[int, ...],
        taps: list[int] | None = None,
    ) -> dict[int, torch.Tensor]:
        """Layers lo..hi-1 over the given batches ({batch: states}), those in `replaced` replaced. With `taps`: the
        states entering each tapped layer (and `hi`'s, when tapped) go to the cache under their prefix."""
        hidden, taps = dict(hidden), set(taps or ())
        for i in range(lo, hi + 1):
            if i in taps and i > lo:
                self.cache.put((tuple(j for j in replaced if j < i), i), [hidden[b].cpu() for b in sorted(hidden)])
            if i == hi:
                break
            layer = self.source.layer(i, self.device)
            try:
                for b, h in hidden.items():
                    h, kw = h.to(self.device), self.kwargs[b][i]
                    if i in replaced:
                        with replaced_layer(layer, i, self.source.config, self.mode, self.method, self.fmap(i)) as rep:
                            out = layer_output(rep(h, **kw))
                    else:
                        out = layer_output(layer(h, **kw))
                    hidden[b] = out
                    self.layer_passes += 1
            finally:
                self.source.release(i)
        return {b: h.cpu() for b, h in hidden.items()}

    def _head_losses(self, hidden: dict[int, torch.Tensor]) -> dict[int, torch.Tensor]:
        """batch -> (rows,) float64 mean next-token loss of each block; the head runs a chunk of positions at a
        time (scoring/likelihood.token_nll): a batch's whole logits were 3.7 GB on a 151,936-entry vocabulary."""
        norm, lm_head = self.source.head(self.device)
        config, out = self.source.config, {}
        chunk = head_chunk(config.vocab_size)
        try:
            for b, h in hidden.items():
                lo, hi, _ = self.batches[b]
                target = self.blocks[lo:hi, 1:].to(self.device)  # (B, T-1)
                nll = token_nll(
                    h.to(self.device)[:, :-1], lambda x: head_logits(config, norm, lm_head, x), target, chunk
                )
                out[b] = nll.double().mean(dim=1).cpu()
        finally:
            self.source.release_head()
        return out
