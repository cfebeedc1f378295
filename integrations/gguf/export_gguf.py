"""Runs in the GGUF venv (.venv-gguf, `make gguf-env`), never in the worker's: a checkpoint directory
to one GGUF file, with llama.cpp's own tools only.

    python export_gguf.py MODEL_DIR OUT.gguf TYPE

    f32 f16 bf16     llama.cpp's converter (convert_hf_to_gguf.py, vendored in the llama-cpp-python
                     sdist the venv was built from) writes TYPE directly
    q8_0 q4_k_m      the converter writes f32 beside OUT, then llama.cpp's quantizer
                     (llama_model_quantize, what `llama-quantize` calls) writes TYPE

The converter never runs a checkpoint's own code here: it asks transformers for trust_remote_code=True on some
tokenizers (a tokenizer_config.json naming HybridDNATokenizer, with an auto_map to a .py beside it, ran that
file in this process), and none of the architectures exported needs remote code, so every Auto class's
from_pretrained is held to trust_remote_code=False (transformers then refuses such a checkpoint).

The tokenizer is embedded by the converter. One thing is chosen here, not written: the converter's
DeciLM class reads a SentencePiece vocabulary unless the vocabulary is Llama-3's size, its Phi-3 class
(Phi3MiniModel) one unless tokenizer_config.json names GPT2Tokenizer (Phi-4), and its Gemma 2 class one
always (Gemma 3's falls back to BPE itself); a checkpoint with a
`tokenizer.json` and no `tokenizer.model` (a BPE tokenizer, e.g. SmolLM2's) takes its own BPE reader
instead (TextModel._set_vocab_gpt2, the one LlamaModel falls back to).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

LLAMA_CPP = Path(sys.prefix) / "llama.cpp"  # the vendored source, linked there by `make gguf-env`
CONVERTED = ("f32", "f16", "bf16")
QUANTIZED = {"q8_0": "LLAMA_FTYPE_MOSTLY_Q8_0", "q4_k_m": "LLAMA_FTYPE_MOSTLY_Q4_K_M"}


def no_remote_code() -> None:
    """Every transformers Auto class loads with trust_remote_code=False, whatever the converter asks."""
    import transformers

    for name in ("AutoConfig", "AutoTokenizer", "AutoProcessor", "AutoModel", "AutoModelForCausalLM"):
        auto = getattr(transformers, name)
        loader = auto.from_pretrained

        def no_code(*args, _loader=loader, **kwargs):
            kwargs["trust_remote_code"] = False
            return _loader(*args, **kwargs)

        auto.from_pretrained = no_code


def bpe_without_spm(own, llama3_vocab: int | None):
    """A converter class's set_vocab that reads a BPE `tokenizer.json` when there is no `tokenizer.model`
    (and the vocabulary is not Llama-3's), where the class's own would stop on the missing SentencePiece file."""

    def set_vocab(self):
        if (self.dir_model / "tokenizer.model").is_file() or self.hparams.get("vocab_size") == llama3_vocab:
            return own(self)
        return self._set_vocab_gpt2()

    return set_vocab


def convert(model_dir: Path, out: Path, outtype: str) -> None:
    no_remote_code()
    sys.path.insert(0, str(LLAMA_CPP))
    import convert_hf_to_gguf
    from conversion.deci import DeciModel
    from conversion.gemma import Gemma2Model
    from conversion.phi import Phi3MiniModel

    for cls, llama3 in ((DeciModel, 128256), (Phi3MiniModel, None), (Gemma2Model, None)):
        cls.set_vocab = bpe_without_spm(cls.set_vocab, llama3)
    # absolute, and the directory after `--`: a folder named `--vocab-only` is never read as an option
    sys.argv = [
        "convert_hf_to_gguf.py",
        "--outfile",
        str(out.absolute()),
        "--outtype",
        outtype,
        "--",
        str(model_dir.absolute()),
    ]
    convert_hf_to_gguf.main()


def quantize(src: Path, out: Path, kind: str) -> None:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, QUANTIZED[kind])
    params.nthread = os.cpu_count() or 1
    if llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), params) != 0:
        raise SystemExit(f"llama.cpp's quantizer failed on {src}")


def main(model_dir: str, out: str, kind: str) -> None:
    model, target = Path(model_dir), Path(out)
    if kind in CONVERTED:
        convert(model, target, kind)
    elif kind in QUANTIZED:
        f32 = target.with_name(target.name + ".f32")
        try:
            convert(model, f32, "f32")
            quantize(f32, target, kind)
        finally:
            f32.unlink(missing_ok=True)
    else:
        raise SystemExit(f"unknown GGUF type {kind!r}: one of {', '.join([*CONVERTED, *QUANTIZED])}")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    main(*sys.argv[1:])
