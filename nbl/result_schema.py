"""The typed `result` of a job (JobOut.result), the OpenAPI's view of nbl/result.py.

The metric families are written once as tables of (field, type, description, example); each yields
two models: the values (also used for `delta`, model - base, whose counts stay whole) and the
relative change (every field a float). JSON has no NaN or Infinity: a number that could not be
measured, or a ratio over a base of 0, is null, and the descriptions say so.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

NULL = "null when not measured (not asked for, not yet run, or not finite)"

PERPLEXITY = {
    "ppl": (float, "perplexity, exp(mean next-token NLL) over the corpus", 21.73),
    "bits_per_byte": (float, "NLL in bits per UTF-8 byte of the text (tokenizer-independent)", 0.9312),
    "tokens": (int, "tokens scored", 245_569),
}
TASK = {
    "acc": (float, "accuracy, lm-eval's `acc`", 0.6012),
    "acc_norm": (
        float,
        "length-normalised accuracy, lm-eval's `acc_norm`; null for tasks that do not report it",
        0.5467,
    ),
    "n": (int, "documents scored", 2376),
    "ppl": (float, "perplexity of the targets (LAMBADA-style tasks only)", 19.2),
}
PARAMS = {
    "params": (int, "all parameters", 134_515_008),
    "non_embedding_params": (int, "parameters outside the input and output embeddings", 106_200_000),
}
SPEED = {
    "decode_tokens_per_s": (float, "greedy decoding throughput after a prefill of decode_context tokens", 61.4),
    "decode_context": (int, "prompt tokens before decoding", 512),
    "new_tokens": (int, "tokens decoded per timed run", 64),
    "kv_cache_bytes_per_token": (float, "KV cache bytes per token of context", 92160.0),
    "kv_cache_layers": (int, "layers that keep a KV cache (a replaced attention keeps none)", 26),
    "params": (int, "all parameters", 134_515_008),
    "non_embedding_params": (int, "parameters outside the embeddings", 106_200_000),
    "base_non_embedding_params": (int, "the base model's non-embedding parameters", 106_200_000),
    "sparsity": (float, "1 - non_embedding_params / base_non_embedding_params", 0.0612),
    "repeats": (int, "timed runs per figure (the median is kept)", 3),
    "threads": (int, "CPU threads torch used", 16),
}
SPEED_TEXT = {
    "device": "device measured on (`nbl eval`/`nbl compress` only; null from the API, which stores numbers only)",
    "dtype": "weights' dtype (`nbl eval`/`nbl compress` only; null from the API)",
}


class Schema(BaseModel):
    model_config = ConfigDict(from_attributes=True)


def _family(name: str, table: dict, relative: bool, extra: dict | None = None) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    for f, (typ, doc, example) in table.items():
        typ = float if relative else typ
        doc = f"relative change of: {doc}" if relative else doc
        fields[f] = (
            typ | None,
            Field(default=None, description=f"{doc}; {NULL}", examples=[None if relative else example]),
        )
    fields.update(extra or {})
    return create_model(name, __base__=Schema, **fields)  # type: ignore[call-overload]


def _speed_extra(relative: bool) -> dict:
    rate = "prefill throughput (tokens/s) by prompt length; null for a length over the model's window"
    out: dict[str, Any] = {
        "prefill_tokens_per_s": (
            dict[str, float | None] | None,
            Field(
                default=None,
                description=f"{'relative change of: ' if relative else ''}{rate}; {NULL}",
                examples=[{"128": 3021.5, "512": 2870.1}],
            ),
        )
    }
    for f, doc in SPEED_TEXT.items():
        out[f] = (str | None, Field(default=None, description=doc if not relative else "always null"))
    return out


PerplexityMetrics = _family("PerplexityMetrics", PERPLEXITY, False)
PerplexityRelative = _family("PerplexityRelative", PERPLEXITY, True)
TaskMetrics = _family("TaskMetrics", TASK, False)
TaskRelative = _family("TaskRelative", TASK, True)
ParamMetrics = _family("ParamMetrics", PARAMS, False)
ParamRelative = _family("ParamRelative", PARAMS, True)
SpeedMetrics = _family("SpeedMetrics", SPEED, False, _speed_extra(False))
SpeedRelative = _family("SpeedRelative", SPEED, True, _speed_extra(True))


def _metrics(name: str, relative: bool) -> type[BaseModel]:
    p, t, s, a = (
        (PerplexityRelative, TaskRelative, SpeedRelative, ParamRelative)
        if relative
        else (PerplexityMetrics, TaskMetrics, SpeedMetrics, ParamMetrics)
    )
    return create_model(
        name,
        __base__=Schema,  # type: ignore[call-overload]
        perplexity=(
            dict[str, p],
            Field(
                default_factory=dict,
                description="by corpus name",
                examples=[{"wikitext2": {"ppl": 21.73, "bits_per_byte": 0.9312, "tokens": 245_569}}],
            ),
        ),
        tasks=(
            dict[str, t],
            Field(
                default_factory=dict,
                description="by lm-eval task name",
                examples=[{"arc_easy": {"acc": 0.6012, "acc_norm": 0.5467, "n": 2376, "ppl": None}}],
            ),
        ),
        speed=(s | None, Field(default=None, description="null unless evaluation.speed was asked")),
        params=(a | None, Field(default=None, description="parameter counts; null before evaluation")),
    )


Metrics = _metrics("Metrics", False)
MetricsRelative = _metrics("MetricsRelative", True)


class CalibrationFacts(Schema):
    tokens: int | None = Field(
        None,
        description="calibration tokens (num_samples x seq_len); null for jobs stored before these facts were kept",
        examples=[524_288],
    )
    seconds: float | None = Field(
        None,
        description="seconds the calibration pass took (0 when read from the statistics cache); null when unknown",
        examples=[94.2],
    )
    cached: bool | None = Field(
        None, description="true when the statistics came from the cache; null when unknown", examples=[False]
    )


class BaseEvaluationFacts(Schema):
    cached: bool | None = Field(
        None,
        description="true when the base's evaluation was reused from the cache: an "
        "earlier job (of any team) evaluated the same model (content fingerprint) with the "
        "same evaluation spec, dtype, device and data",
        examples=[True],
    )
    seconds: float | None = Field(
        None,
        description="seconds this job spent on the base's evaluation (reading the cache when cached)",
        examples=[0.02],
    )


class QuantizedResult(Schema):
    """A copy quantized by publish.quantize: llm-compressor's compressed-tensors checkpoint that vLLM loads."""

    scheme: str = Field(description="fp8-dynamic, w8a8 or w4a16 (docs/serving.md: where each runs)", examples=["w4a16"])
    path: str | None = Field(
        None, description="its folder inside the output (null for the base's, never published)", examples=["w4a16"]
    )
    bytes: int | None = Field(None, description="its weights on disk (*.safetensors)", examples=[169_200_000])
    calibration_tokens: int | None = Field(
        None, description="the tokens GPTQ fitted on (the job's own calibration blocks); 0 for fp8-dynamic"
    )
    method: str | None = Field(None, description="gptq, smoothquant+gptq or round-to-nearest", examples=["gptq"])
    group_size: int | None = Field(None, description="w4a16's group of inputs per scale", examples=[64])
    unquantized: list[str] | None = Field(
        None, description="the Linear layers left as they were", examples=[["lm_head"]]
    )
    llmcompressor: str | None = Field(None, description="llm-compressor's version", examples=["0.14.0.1"])
    compressed_tensors: str | None = Field(None, description="compressed-tensors' version", examples=["0.19.0"])
    metrics: Metrics | None = Field(None, description="it, reloaded from disk; null until evaluated")
    delta: Metrics | None = Field(None, description="metrics - the unquantized base's")
    relative: MetricsRelative | None = Field(None, description="(metrics - base) / |base|, the unquantized base")


class OutputResult(Schema):
    k: int = Field(description="layers replaced in this output", examples=[4])
    mode: str | None = Field(None, description="attn or block", examples=["attn"])
    method: str | None = Field(
        None, description="nbl (the fitted linear map) or drop (the layer removed)", examples=["nbl"]
    )
    criterion: str | None = Field(None, description="the score the layers were ranked by", examples=["cca"])
    form: str = Field(
        "nbl",
        description="how the output is written: nbl (our modeling file), linear (DeciLM "
        "replace_with_linear) or fold (the map folded into the previous MLP)",
        examples=["fold"],
    )
    runs_in: list[str] = Field(
        default_factory=list,
        description="runtimes that load it with no code of ours "
        "(`transformers+file`: through the modeling file shipped with it, trust_remote_code; "
        "`vllm+plugin`: with the nbl_vllm plugin); docs/serving.md says which are tested",
        examples=[["transformers", "vllm", "sglang", "tensorrt-llm", "llama.cpp"]],
    )
    layers: list[int] | None = Field(
        None, description="the replaced layers, ascending; null until scoring ends", examples=[[19, 21, 22, 23]]
    )
    dtype: str | None = Field(
        None,
        description="the saved weights' dtype (publish.dtype; auto: the base's, bfloat16 from a GGUF); "
        "null until the output is written",
        examples=["bfloat16"],
    )
    metrics: Metrics | None = Field(None, description="this output, reloaded from disk; null until evaluated")
    delta: Metrics | None = Field(None, description="metrics - base, field by field; null until both are evaluated")
    relative: MetricsRelative | None = Field(
        None,
        description="(metrics - base) / |base| (0.05: 5 % higher); a "
        "field is null where the base is 0; null until both are evaluated",
    )
    seconds: float | None = Field(
        None, description="seconds this output's reload and evaluation took; null until evaluated", examples=[31.5]
    )
    refit: RefitFacts | None = Field(None, description="compression.refit sequential: the refit; null without one")
    heal: HealFacts | None = Field(None, description="compression.heal: the healing; null without one")
    quantized: list[QuantizedResult] = Field(
        default_factory=list, description="publish.quantize: this output once more per scheme; empty without it"
    )


class RefitFacts(Schema):
    seconds: float | None = Field(None, description="seconds the sequential refit took", examples=[35.2])
    cached: bool | None = Field(
        None,
        description="true when the refitted maps of this layer set came from the statistics cache",
        examples=[False],
    )


class HealFacts(Schema):
    tokens: int | None = Field(None, description="training tokens seen (steps x block length)", examples=[12288])
    steps: int | None = Field(None, description="optimiser steps run", examples=[48])
    lr: float | None = Field(
        None, description="Adam's peak learning rate (cosine to 0 over the steps)", examples=[1e-5]
    )
    seconds: float | None = Field(
        None, description="seconds healing took (its perplexities included)", examples=[240.0]
    )
    perplexity_before: float | None = Field(
        None, description="perplexity on the held-out healing blocks before", examples=[61.2]
    )
    perplexity_after: float | None = Field(None, description="the same after healing", examples=[55.4])
    guard_perplexity_before: float | None = Field(
        None,
        description=(
            "perplexity on the selection dataset's blocks before healing, when the job gives a selection dataset other "
            "than the calibration's (the guard against a heal that learns the healing text's domain); null without "
            "one"
        ),
        examples=[27.6],
    )
    guard_perplexity_after: float | None = Field(None, description="the same after healing", examples=[27.4])
    kept: bool | None = Field(
        None,
        description="false when healing raised the held-out or the guard's perplexity: "
        "the maps before healing were written",
        examples=[True],
    )


class JobResult(Schema):
    """What a job measured, in the shape `nbl eval --json` and `nbl compress --json` use."""

    calibration: CalibrationFacts | None = Field(None, description="the calibration pass; null until it ran")
    base: Metrics | None = Field(
        None, description="the uncompressed model; null until evaluated (or when the request asked for no evaluation)"
    )
    base_evaluation: BaseEvaluationFacts | None = Field(
        None, description="how the base's figures were had: measured, or reused from the cache; null until evaluated"
    )
    base_quantized: list[QuantizedResult] = Field(
        default_factory=list,
        description="publish.quantize with an evaluation: the base quantized alike, for base vs base + scheme",
    )
    outputs: list[OutputResult] = Field(default_factory=list, description="one per requested k, in request order")
