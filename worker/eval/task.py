"""What an evaluation task is once its prompts are built: documents ready to score.

Every source of tasks (the shipped files, lm-eval's own task configs, a user's JSONL file) ends
here, so one scorer and one set of metrics serve them all.
"""

from __future__ import annotations

from dataclasses import dataclass

MULTIPLE_CHOICE = "multiple_choice"  # pick the choice with the highest log-likelihood
LOGLIKELIHOOD = "loglikelihood"  # one target; acc = the target is the greedy continuation


@dataclass(frozen=True)
class Doc:
    """One document.

    `continuations` are the strings scored after `context`, exactly as lm-eval sends them (its target
    delimiter, usually a space, included); `choice_lengths` are the characters acc_norm divides by,
    which lm-eval counts on the choice *without* the delimiter.
    """

    context: str
    continuations: tuple[str, ...]
    label: int
    choice_lengths: tuple[int, ...]


@dataclass(frozen=True)
class Task:
    name: str
    kind: str  # MULTIPLE_CHOICE | LOGLIKELIHOOD
    docs: tuple[Doc, ...]
    metrics: tuple[str, ...]  # what lm-eval reports for it: ("acc", "acc_norm") or ("acc",)


def choice_doc(context: str, choices: list[str], label: int, delimiter: str = " ") -> Doc:
    """A multiple-choice document as lm-eval builds it: each choice scored as `delimiter + choice`."""
    if not 0 <= label < len(choices):
        raise ValueError(f"label {label} is not an index into {len(choices)} choices")
    return Doc(context, tuple(delimiter + c for c in choices), label, tuple(len(c) for c in choices))
