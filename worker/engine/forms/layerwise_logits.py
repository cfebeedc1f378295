"""The compressed model's logits on a few token ids, one decoder layer's weights at a time.

The job's load check (worker/publish/loadcheck.py) compares each saved output, reloaded in a fresh
process, with the compressed model's logits on short probe ids. Those logits are computed here from the
base checkpoint and the fitted maps, not from the written files (so a wrong write is caught), and as
calibration reads the model: the stem, then each layer in turn (its tensors read, run, dropped), then
the final norm and LM head. Neither host nor device holds the whole model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from worker.engine.calibration.activations import HiddenCache
from worker.engine.calibration.calibrate import first_pass
from worker.engine.calibration.layer_source import head_logits
from worker.engine.forms.form_layers import form_layer
from worker.engine.forms.surgery import Plan
from worker.engine.scoring.scores import LinearMap
from worker.engine.selection.loss_probe import layer_output, replaced_layer


@dataclass
class LayerwiseModel:
    """Stands in for the compressed model where only its logits are asked (loadcheck.reference)."""

    source: object  # a layer source (layer_source.py): CheckpointLayers or ModelLayers
    plan: Plan
    maps: dict[int, LinearMap]

    @property
    def config(self):
        return self.source.config

    @property
    def dtype(self) -> torch.dtype:
        return self.source.dtype

    @property
    def device(self) -> torch.device:
        return torch.device(self.source.device)

    @torch.no_grad()
    def logits(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, T) token ids -> (B, T, V) float32 logits on the CPU."""
        source, device = self.source, self.device
        with HiddenCache(None, None) as cache:
            kwargs = first_pass(source, ids, [(0, ids.shape[0], "probe")], device, cache)[0]
            h = cache.pop(0).to(device)
        source.release_stem()
        d = source.config.hidden_size
        for i in range(source.config.num_hidden_layers):
            layer = source.layer(i, device)
            try:
                if self.plan.form != "nbl":
                    with form_layer(layer, i, self.plan, self.maps, d) as rep:
                        h = h if rep is None else layer_output(rep(h, **kwargs[i]))
                elif i in self.plan.layers:
                    fmap = self.maps.get(i) if self.plan.method == "nbl" else None
                    with replaced_layer(layer, i, source.config, self.plan.mode, self.plan.method, fmap) as rep:
                        h = layer_output(rep(h, **kwargs[i]))
                else:
                    h = layer_output(layer(h, **kwargs[i]))
            finally:
                source.release(i)
        norm, lm_head = source.head(device)
        try:
            return head_logits(source.config, norm, lm_head, h).float().cpu()
        finally:
            source.release_head()
