"""The task registry: names -> Tasks built from the shipped files with lm-eval's prompts.

A name resolves to the files under the data directory (NBL_DATA_DIR) when the caller gives one and
it holds that task's data (the shipped seven always; PIQA and WinoGrande when their files are there,
local_data.OPTIONAL); otherwise to lm-eval's own task of that name (read offline from the Hugging
Face cache). `limit` takes the first N documents, per subject for MMLU, as lm-eval's --limit does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from . import local_data, prompts
from .task import LOGLIKELIHOOD, MULTIPLE_CHOICE, Doc, Task

ACC = ("acc",)
ACC_NORM = ("acc", "acc_norm")

# name -> (prompt, kind, metrics lm-eval reports); MMLU is built apart (few-shot, 57 subjects)
SINGLE_FILE: dict[str, tuple[Callable[[dict], Doc], str, tuple[str, ...]]] = {
    "arc_easy": (prompts.arc, MULTIPLE_CHOICE, ACC_NORM),
    "arc_challenge": (prompts.arc, MULTIPLE_CHOICE, ACC_NORM),
    "hellaswag": (prompts.hellaswag, MULTIPLE_CHOICE, ACC_NORM),
    "boolq": (prompts.boolq, MULTIPLE_CHOICE, ACC),
    "openbookqa": (prompts.openbookqa, MULTIPLE_CHOICE, ACC_NORM),
    "lambada_openai": (prompts.lambada, LOGLIKELIHOOD, ACC),
    "piqa": (prompts.piqa, MULTIPLE_CHOICE, ACC_NORM),  # when the data directory holds it
    "winogrande": (prompts.winogrande, MULTIPLE_CHOICE, ACC),  # likewise; multiple_input
}
SHIPPED = (*local_data.FILES,)  # always under NBL_DATA_DIR


def load_task(name: str, limit: int | None = None, data_dir: Path | None = None) -> Task:
    """`data_dir`: the shipped files (Settings.data_dir); None, or a name it does not ship: lm-eval's task."""
    if local_data.present(name, data_dir):
        return local_task(name, Path(data_dir), limit)  # type: ignore[arg-type]
    from .lmeval import lmeval_task

    return lmeval_task(name, limit)


def local_task(name: str, root: Path, limit: int | None = None) -> Task:
    if name == "mmlu":
        return mmlu_task(root, limit)
    prompt, kind, metrics = SINGLE_FILE[name]
    docs = local_data.read_docs(name, root)[:limit]
    return Task(name, kind, tuple(prompt(d) for d in docs), metrics)


def mmlu_task(root: Path, limit: int | None = None) -> Task:
    docs = []
    for subject in local_data.mmlu_subjects(root):
        shots = local_data.read_mmlu(root, subject, "dev")[: prompts.MMLU_SHOTS]
        docs += [prompts.mmlu(d, shots) for d in local_data.read_mmlu(root, subject, "test")[:limit]]
    return Task("mmlu", MULTIPLE_CHOICE, tuple(docs), ACC)
