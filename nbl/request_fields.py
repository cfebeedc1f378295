"""The strings and numbers of a request body (nbl/request.py), each an annotated type with its grammar: model
ids, revisions, Hub repos, simple names, dataset names, configs, splits and text fields, k, webhook URLs,
metadata keys and values; and the names the evaluation takes (its corpora and tasks).

Names are checked against grammars, not resolved (nbl/names.py holds those the rest of the tree shares). The
validators raise ValueError, so bad input is a 422.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, StrictInt

from nbl.data.dataset_names import refuse_local_reader
from nbl.names import HUB_PART, REVISION, SIMPLE, hub_id, model_id, revision, simple_name
from nbl.plain_text import plain_text
from nbl.webhook_urls import MAX_URL_LENGTH, check_syntax

_CONFIG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_SPLIT = re.compile(r"[A-Za-z0-9_]+(?:\[[0-9:%+-]*\])?(?:\+[A-Za-z0-9_]+(?:\[[0-9:%+-]*\])?)*")
_FIELD = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
META_KEY = re.compile(r"[A-Za-z0-9_.:/-]{1,64}")

DATASET_ALIASES = ("c4", "wikitext2")
PERPLEXITY_CORPORA = ("wikitext2", "c4")
# The shipped tasks, and the paper's two that run when lm-eval's data is in the worker's Hugging Face cache
EVAL_TASKS = (
    "arc_easy",
    "arc_challenge",
    "hellaswag",
    "boolq",
    "openbookqa",
    "lambada_openai",
    "mmlu",
    "piqa",
    "winogrande",
)
K_HARD_MAX = 4096  # no model has more layers; Settings.max_k is the deployment's own cap


def dataset_name(value: str) -> str:
    refuse_local_reader(value)  # a file name, or one of datasets' built-in loaders of local files
    return value if value in DATASET_ALIASES else hub_id(value)


def _k_values(value: int | list[int]) -> int | list[int]:
    ks = [value] if isinstance(value, int) else value
    if not ks:
        raise ValueError("give at least one k")
    if len(ks) > 16:
        raise ValueError("at most 16 values of k")
    if len(set(ks)) != len(ks):
        raise ValueError("values of k must be distinct")
    for k in ks:
        if not 1 <= k <= K_HARD_MAX:
            raise ValueError(f"k must be between 1 and {K_HARD_MAX}, got {k}")
    return value


def _pattern(rx: re.Pattern, what: str):
    def check(value: str) -> str:
        if not rx.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid {what}")
        return value

    return check


# The grammars, documented in the OpenAPI schema (`pattern`) so clients and fuzzers know them; the
# validators stay the authority (they also refuse `--` and `..`, which a plain pattern cannot say).
_P_HUB = f"{HUB_PART.pattern}(?:/{HUB_PART.pattern})?"
_P_SIMPLE = SIMPLE.pattern


def _doc_pattern(rx: str) -> dict:
    return {"pattern": f"^(?:{rx})$"}


ModelId = Annotated[
    str,
    Field(min_length=1, max_length=200, json_schema_extra=_doc_pattern(f"local:{_P_SIMPLE}|{_P_HUB}")),
    AfterValidator(model_id),
]
Revision = Annotated[
    str, Field(min_length=1, max_length=255, json_schema_extra=_doc_pattern(REVISION.pattern)), AfterValidator(revision)
]
HubRepoId = Annotated[
    str,
    Field(min_length=3, max_length=200, json_schema_extra=_doc_pattern(f"{HUB_PART.pattern}/{HUB_PART.pattern}")),
    AfterValidator(lambda v: hub_id(v, need_owner=True)),
]
SimpleName = Annotated[
    str, Field(min_length=1, max_length=128, json_schema_extra=_doc_pattern(_P_SIMPLE)), AfterValidator(simple_name)
]
KValue = Annotated[StrictInt, Field(ge=1, le=K_HARD_MAX)]
# compression.k's numbers: one k or up to 16 distinct ones (the function's name is in a 422's `loc`: keep it)
KValues = Annotated[KValue | Annotated[list[KValue], Field(min_length=1, max_length=16)], AfterValidator(_k_values)]
WebhookUrl = Annotated[str, Field(min_length=1, max_length=MAX_URL_LENGTH), AfterValidator(check_syntax)]

DatasetName = Annotated[
    str, Field(max_length=200, json_schema_extra=_doc_pattern(_P_HUB)), AfterValidator(dataset_name)
]
DatasetConfig = Annotated[
    str, Field(json_schema_extra=_doc_pattern(_CONFIG.pattern)), AfterValidator(_pattern(_CONFIG, "dataset config"))
]
Split = Annotated[
    str, Field(max_length=64, json_schema_extra=_doc_pattern(_SPLIT.pattern)), AfterValidator(_pattern(_SPLIT, "split"))
]
TextField = Annotated[
    str, Field(json_schema_extra=_doc_pattern(_FIELD.pattern)), AfterValidator(_pattern(_FIELD, "text field"))
]

MetaKey = Annotated[
    str, Field(json_schema_extra=_doc_pattern(META_KEY.pattern)), AfterValidator(_pattern(META_KEY, "metadata key"))
]


MetaValue = Annotated[
    str,
    Field(max_length=512, json_schema_extra=_doc_pattern(r"[^\x00-\x08\x0b\x0c\x0e-\x1f\x7f]*")),
    AfterValidator(plain_text),
]
