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

    A multiple-input document (lm-eval's `multiple_input`, WinoGrande) has one context per option
    in `contexts` and one continuation scored after each; `context` is then "". The option whose
    context gives the continuation the highest log-likelihood is the prediction.
    """

    context: str
    continuations: tuple[str, ...]
    label: int
    choice_lengths: tuple[int, ...]
    contexts: tuple[str, ...] = ()

    def pairs(self) -> list[tuple[str, str]]:
        """The (context, continuation) requests of this document, one per option, in option order."""
        if self.contexts:
            return [(c, self.continuations[0]) for c in self.contexts]
        return [(self.context, c) for c in self.continuations]


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


def multiple_input_doc(contexts: list[str], continuation: str, label: int, lengths: list[int] | None = None) -> Doc:
    """A multiple-input document: `continuation` scored after each context. `lengths` are what
    lm-eval's acc_norm would divide by (its options before any few-shot prefix); by default the
    contexts' lengths."""
    if not 0 <= label < len(contexts):
        raise ValueError(f"label {label} is not an index into {len(contexts)} contexts")
    lengths = [len(c) for c in contexts] if lengths is None else lengths
    return Doc("", (continuation,), label, tuple(lengths), tuple(contexts))
