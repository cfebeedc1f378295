"""lm-eval's split of a (context, continuation) pair into tokens (HFLM, lm-eval 0.4), and its window.

- whitespace at the end of the context moves to the front of the continuation;
- whole = encode(context + continuation), ctx = encode(context), cont = whole[len(ctx):],
  so a BPE merge across the boundary is charged to the continuation;
- an empty context becomes the prefix token (BOS, else EOS);
- encode() keeps the tokenizer's own special-token default (a BOS for Llama tokenizers, none for
  GPT-2 style ones), unless the text already starts with the prefix token's text.
"""

from __future__ import annotations

DEFAULT_MAX_LENGTH = 2048  # lm-eval's fallback when neither config nor tokenizer gives a length
TOKENIZER_INFINITY = 1000000000000000019884624838656


def max_length(model, tokenizer) -> int:
    """The context window lm-eval assumes: config n_positions / max_position_embeddings / n_ctx,
    else the tokenizer's model_max_length, else 2048."""
    for attr in ("n_positions", "max_position_embeddings", "n_ctx"):
        value = getattr(model.config, attr, None)
        if value:
            return int(value)
    tok_max = getattr(tokenizer, "model_max_length", None)
    if tok_max and tok_max != TOKENIZER_INFINITY:
        return int(tok_max)
    return DEFAULT_MAX_LENGTH


def prefix_token_id(tokenizer) -> int:
    return tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id


def encode(tokenizer, text: str) -> list[int]:
    if text.startswith(tokenizer.decode(prefix_token_id(tokenizer))):
        return tokenizer.encode(text, add_special_tokens=False)
    return tokenizer.encode(text)


def encode_pair(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """(context tokens, continuation tokens) split as lm-eval splits them."""
    if context == "":
        cont = tokenizer.encode(continuation, add_special_tokens=False)
        prefix = prefix_token_id(tokenizer)
        ctx, cont = ([prefix], cont) if cont and prefix != cont[0] else (cont[:1], cont[1:])
    else:
        n_spaces = len(context) - len(context.rstrip())
        if n_spaces:
            context, continuation = context[:-n_spaces], context[-n_spaces:] + continuation
        whole = encode(tokenizer, context + continuation)
        ctx = encode(tokenizer, context)
        cont = whole[len(ctx) :]
    if not cont:
        raise ValueError(f"continuation {continuation!r} has no tokens of its own after {context[-40:]!r}")
    return ctx, cont
