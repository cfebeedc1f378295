"""Healing's text comes from the calibration data after the calibration's own blocks, so the data must give
num_samples + the heal's blocks of seq_len tokens (heal_split: training and held out). The one count, and the
one refusal: the API's at submit, against the most tokens a shipped copy can give (nbl/data/shipped.py; a Hub
dataset's are not known there), and the worker's before it calibrates, against the blocks it tokenized
(worker/engine/refine/stage.healing_stream). Torch-free.
"""

from __future__ import annotations

from nbl.refine_schema import heal_split

FIELD = ("compression", "heal", "tokens")


def stream_blocks(num_samples: int, seq_len: int, heal_tokens: int) -> int:
    """Blocks the calibration data must give: the calibration's, then the healing's."""
    return num_samples + sum(heal_split(heal_tokens, seq_len))


def heal_data_error(num_samples: int, seq_len: int, heal_tokens: int, have: str) -> str:
    """The refusal's words; `have`: what the data was found to give."""
    heal = stream_blocks(num_samples, seq_len, heal_tokens) - num_samples
    return (
        f"{'.'.join(FIELD)}: the healing text is taken after the calibration's {num_samples:,} blocks, so the "
        f"calibration data must give {num_samples:,} + {heal:,} blocks of {seq_len:,} tokens; {have}: ask fewer "
        "tokens (or fewer calibration samples)"
    )


def bound_error(num_samples: int, seq_len: int, heal_tokens: int, most_tokens: int | None) -> str | None:
    """Why the data cannot hold the heal, when it gives at most `most_tokens` (None: not known, no refusal)."""
    if most_tokens is None or most_tokens // seq_len >= stream_blocks(num_samples, seq_len, heal_tokens):
        return None
    return heal_data_error(
        num_samples, seq_len, heal_tokens, f"it gives at most {most_tokens:,} tokens, {most_tokens // seq_len:,} blocks"
    )
