"""Hidden states at a layer's input with a prefix of replacements applied, kept for the sets that share it.

A layer set S evaluated from layer j needs the hidden states entering j with S's layers below j replaced.
An entry (P, j) holds exactly those for every S with S ∩ [0, j) == P: the base model's states at j (P empty,
valid for every set starting at or after j), or a greedy step's chosen set applied below a candidate's layer
(valid for every candidate set of that step, which differs from the chosen set only at and after j).

Base entries (P empty) are kept while the selection runs, one per layer a set started at, as before.
Prefix entries are bounded by `max_bytes`: the oldest go first; an entry that does not fit is not kept
(its sets then run from a base entry, as they would without it).
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from nbl.selection.sets import PREFIX_CACHE_BYTES

Key = tuple[tuple[int, ...], int]  # (replaced layers below j, j)


class PrefixCache:
    def __init__(self, max_bytes: int | None = PREFIX_CACHE_BYTES):
        self.base: dict[int, list[torch.Tensor]] = {}  # j -> per batch, the unmodified model's states entering j
        self.prefixed: OrderedDict[Key, list[torch.Tensor]] = OrderedDict()
        self.max_bytes, self.bytes = max_bytes, 0

    def __contains__(self, key: Key) -> bool:
        prefix, j = key
        return j in self.base if not prefix else key in self.prefixed

    def get(self, key: Key) -> list[torch.Tensor]:
        prefix, j = key
        if not prefix:
            return self.base[j]
        self.prefixed.move_to_end(key)
        return self.prefixed[key]

    def put(self, key: Key, states: list[torch.Tensor]) -> None:
        prefix, j = key
        if not prefix:
            self.base[j] = states
            return
        size = sum(h.numel() * h.element_size() for h in states)
        if self.max_bytes is not None and size > self.max_bytes:
            return
        while self.max_bytes is not None and self.bytes + size > self.max_bytes and self.prefixed:
            _, old = self.prefixed.popitem(last=False)
            self.bytes -= sum(h.numel() * h.element_size() for h in old)
        self.prefixed[key] = states
        self.bytes += size

    def best_start(self, layers: tuple[int, ...], limit: int | None = None) -> Key:
        """The deepest entry valid for the set `layers` (sorted): (P, j) with P == layers ∩ [0, j), and j <= limit
        when given. The base entry at layer 0 always exists, so there is one."""
        top = min(layers[0] if layers else 1 << 30, 1 << 30 if limit is None else limit)
        best: Key = ((), max(j for j in self.base if j <= top))
        for prefix, j in self.prefixed:
            if best[1] < j <= (1 << 30 if limit is None else limit) and prefix == tuple(i for i in layers if i < j):
                best = (prefix, j)
        return best
