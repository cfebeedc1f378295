"""Where calibration gets a decoder's weights from, one layer at a time.

Two sources, one interface, so that calibration has a single path:

    ModelLayers        a model already in memory (tests, the job pipeline's loaded model): each layer
                       is used where it lies; nothing is loaded or freed.
    CheckpointLayers   a safetensors checkpoint: the model is built on the meta device (no weights);
                       the stem (embeddings, final norm, rotary tables) is read once, and each decoder
                       layer's tensors are read from the shards when its turn comes and dropped after.
                       Neither host nor device ever holds the whole model; the LM head is never read.

As llm-compressor's sequential pipeline does, but without modifying the model: NBL calibrates the
unmodified model, so each layer's statistics are exactly those of a full forward pass.
"""

from __future__ import annotations

from pathlib import Path

import torch

from worker.engine.calibration.host_memory import off_heap_copy
from worker.engine.loading.checkpoint_names import to_modules
from worker.engine.loading.weight_files import weight_map


def layer_prefix(i: int) -> str:
    return f"model.layers.{i}."


class ModelLayers:
    """A model whose weights are all in memory already."""

    def __init__(self, model, path: Path | None = None):
        self.model = model
        self.path = path  # its checkpoint, if it was loaded from one: other processes read it there
        self.config = model.config
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype

    def stem(self, device) -> torch.nn.Module:
        return self.model.model

    def release_stem(self) -> None:
        pass

    def head(self, device) -> tuple[torch.nn.Module, torch.nn.Module]:
        return self.model.model.norm, self.model.lm_head

    def release_head(self) -> None:
        pass

    def layer(self, i: int, device) -> torch.nn.Module:
        return self.model.model.layers[i]

    def release(self, i: int) -> None:
        pass

    def checkpoint_dir(self) -> Path:
        if self.path is None:
            raise ValueError(
                "calibrating on several devices needs the model's checkpoint directory: the "
                "other processes read the weights from it"
            )
        return Path(self.path)


class CheckpointLayers:
    """A safetensors checkpoint directory read layer by layer into a meta-device skeleton."""

    def __init__(self, path: Path, dtype: torch.dtype, device="cpu"):
        from accelerate import init_empty_weights
        from transformers import AutoConfig, AutoModelForCausalLM

        self.path = Path(path)
        self.dtype = dtype
        self.device = torch.device(device)
        self.config = AutoConfig.from_pretrained(self.path, trust_remote_code=False)  # checked by model_rules.py
        # parameters on the meta device, buffers real: those computed at construction and not in the checkpoint
        # (rotary tables, Gemma's embed_scale) are the model's own
        with init_empty_weights(include_buffers=False):
            self.model = AutoModelForCausalLM.from_config(self.config, dtype=dtype).eval()
        self.config = self.model.config
        self.files = tensor_files(self.path)
        self._stem_ready = False

    def _read(self, prefix: str, device, off_heap: bool = False) -> dict[str, torch.Tensor]:
        """Every tensor whose name starts with `prefix` (prefix removed), cast to the model's dtype;
        `off_heap`: each in its own host mapping (host_memory.py), for a decoder layer's weights."""
        from safetensors import safe_open

        out = {}
        by_file: dict[str, list[str]] = {}
        for name, file in self.files.items():
            if name.startswith(prefix):
                by_file.setdefault(file, []).append(name)
        for file, names in by_file.items():
            with safe_open(str(self.path / file), "pt", device="cpu") as f:
                for name in names:
                    t = f.get_tensor(name)
                    dtype = self.dtype if t.is_floating_point() else t.dtype
                    on_host = torch.device(device).type == "cpu"
                    out[name] = off_heap_copy(t, dtype) if off_heap and on_host else t.to(device, dtype)
        # a MoE layer's experts are one matrix each in the file, one stacked parameter in the model
        return {name[len(prefix) :]: t for name, t in to_modules(self.model, out).items()}

    def stem(self, device) -> torch.nn.Module:
        """The decoder with its embeddings, final norm and rotary tables on `device`; layers stay meta."""
        decoder = self.model.model
        if not self._stem_ready:
            for name, child in decoder.named_children():
                if name == "layers":
                    continue
                if name == "rotary_emb":  # its tables are buffers computed at construction, not weights
                    decoder.rotary_emb = type(child)(config=self.config).to(device)
                    continue
                child.load_state_dict(self._read(f"model.{name}.", device), strict=True, assign=True)
                child.to(device)  # its buffers
            self._stem_ready = True
        return decoder

    def release_stem(self) -> None:
        """Drop the embeddings and the final norm once the first pass has produced layer 0's inputs."""
        for name, child in self.model.model.named_children():
            if name not in ("layers", "rotary_emb"):
                weights_to_meta(child)
        self._stem_ready = False

    def head(self, device) -> tuple[torch.nn.Module, torch.nn.Module]:
        """The final norm and the LM head on `device` (the loss probe's last step)."""
        norm, lm_head = self.model.model.norm, self.model.lm_head
        norm.load_state_dict(self._read("model.norm.", device), strict=True, assign=True)
        norm.to(device)
        tied = "lm_head.weight" not in self.files  # tie_word_embeddings: the head is the embedding matrix
        lm_head.load_state_dict(
            self._read("model.embed_tokens." if tied else "lm_head.", device), strict=True, assign=True
        )
        return norm, lm_head

    def release_head(self) -> None:
        weights_to_meta(self.model.model.norm)
        weights_to_meta(self.model.lm_head)
        self._stem_ready = False

    def layer(self, i: int, device) -> torch.nn.Module:
        layer = self.model.model.layers[i]
        layer.load_state_dict(self._read(layer_prefix(i), device, off_heap=True), strict=True, assign=True)
        return layer.to(device)  # its buffers, if any

    def release(self, i: int) -> None:
        weights_to_meta(self.model.model.layers[i])

    def checkpoint_dir(self) -> Path:
        return self.path


def head_logits(config, norm: torch.nn.Module, lm_head: torch.nn.Module, h: torch.Tensor) -> torch.Tensor:
    """The logits of the last hidden states `h`, as the family's causal LM computes them: the final norm, the
    head, and Gemma 2's soft cap (cap · tanh(logits / cap)), which the probes' losses must see too."""
    logits = lm_head(norm(h))
    cap = getattr(config, "final_logit_softcapping", None)
    return torch.tanh(logits / cap) * cap if cap else logits


def weights_to_meta(module: torch.nn.Module) -> None:
    """Drop a module's weights (back to the meta device), keeping its buffers: they are not in the checkpoint."""
    for m in module.modules():
        for name, p in m._parameters.items():
            if p is not None and p.device.type != "meta":
                m._parameters[name] = torch.nn.Parameter(p.to("meta"), requires_grad=p.requires_grad)


def tensor_files(path: Path) -> dict[str, str]:
    """Tensor name -> shard file name, from model.safetensors.index.json or the shards' headers; every shard
    checked to be a regular file of the model's own folder before any is opened (weight_files.py)."""
    index = weight_map(path)
    if index is not None:
        return index
    from safetensors import safe_open

    files = {}
    for shard in sorted(path.glob("*.safetensors")):
        with safe_open(str(shard), "pt") as f:
            files.update({k: shard.name for k in f.keys()})
    return files


def as_source(model_or_source):
    return ModelLayers(model_or_source) if isinstance(model_or_source, torch.nn.Module) else model_or_source
