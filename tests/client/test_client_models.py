"""nbl_client's models against the app's OpenAPI (generated in-process): every field of a client
model exists in the server's schema, with a type the client accepts for every type the server may
send, and a field the client requires is required there too. A rename or a type change on either
side fails here, before a client meets it."""

from __future__ import annotations

import copy

import pytest

from nbl_client import models
from service.api import create_app

PAIRS = [
    (models.Job, "JobOut"),
    (models.JobList, "JobList"),
    (models.Event, "EventOut"),
    (models.EventList, "EventList"),
    (models.Artifact, "ArtifactOut"),
    (models.JobError, "JobError"),
    (models.OutputFile, "OutputFile"),
    (models.OutputFileList, "OutputFileList"),
    (models.Result, "JobResult"),
    (models.Metrics, "Metrics"),
    (models.Relative, "MetricsRelative"),
    (models.SelectedLayers, "SelectedLayers"),
    (models.ModelInfo, "ModelOut"),
    (models.ModelList, "ModelList"),
    (models.UsageMonth, "Month"),
    (models.Usage, "UsageOut"),
    (models.BaseEvaluation, "BaseEvaluationFacts"),
]


def _resolve(node: dict, defs: dict) -> dict:
    while "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[-1]]
    return node


def _alternatives(node: dict, defs: dict) -> list[dict]:
    node = _resolve(node, defs)
    for key in ("anyOf", "oneOf"):
        if key in node:
            return [alt for sub in node[key] for alt in _alternatives(sub, defs)]
    return [node]


def _kind(node: dict) -> str:
    if "type" in node:
        return node["type"]
    values = node.get("enum", [node["const"]] if "const" in node else None)
    if values:
        return {str: "string", bool: "boolean", int: "integer", float: "number"}[type(values[0])]
    return "object" if "properties" in node else "any"


def compare(client: dict, cdefs: dict, server: dict, sdefs: dict, path: str) -> list[str]:
    """What the server may send that the client cannot take, and client fields the server lacks."""
    problems = []
    calts = _alternatives(client, cdefs)
    for s in _alternatives(server, sdefs):
        sk = _kind(s)
        fits = [c for c in calts if _kind(c) in ("any", sk) or (_kind(c), sk) == ("number", "integer")]
        if not fits:
            problems.append(f"{path}: the API sends {sk}, the client takes {sorted({_kind(c) for c in calts})}")
            continue
        c = fits[0]
        if c.get("format") == "date-time" and s.get("format") != "date-time":
            problems.append(f"{path}: the client expects a date-time, the API does not say so")
        if "enum" in c and set(s.get("enum", [s.get("const")])) - set(c["enum"]):
            problems.append(f"{path}: the API may send values the client does not know")
        if sk == "array" and "items" in c:
            problems += compare(c["items"], cdefs, s.get("items", {}), sdefs, f"{path}[]")
        if sk == "object" and "properties" in c:
            problems += compare_fields(c, cdefs, s, sdefs, path)
        if sk == "object" and all(isinstance(x.get("additionalProperties"), dict) for x in (c, s)):  # maps
            problems += compare(c["additionalProperties"], cdefs, s["additionalProperties"], sdefs, f"{path}{{}}")
    return problems


def compare_fields(c: dict, cdefs: dict, s: dict, sdefs: dict, path: str) -> list[str]:
    problems, sprops = [], s.get("properties", {})
    for name, prop in c["properties"].items():
        if name not in sprops:
            problems.append(f"{path}.{name}: not in the API's schema")
        else:
            problems += compare(prop, cdefs, sprops[name], sdefs, f"{path}.{name}")
    problems += [
        f"{path}.{n}: required by the client, optional in the API"
        for n in c.get("required", [])
        if n in sprops and n not in s.get("required", [])
    ]
    return problems


@pytest.fixture(scope="module")
def server_defs() -> dict:
    return create_app().openapi()["components"]["schemas"]


def check(model, server_name: str, sdefs: dict) -> list[str]:
    cschema = model.model_json_schema(mode="validation")
    name = server_name if server_name in sdefs else f"{server_name}-Output"
    return compare(cschema, cschema.get("$defs", {}), sdefs[name], sdefs, model.__name__)


@pytest.mark.parametrize("model, server_name", PAIRS, ids=[m.__name__ for m, _ in PAIRS])
def test_client_model_matches_the_openapi(model, server_name, server_defs):
    assert check(model, server_name, server_defs) == []


def test_drift_is_caught(server_defs):
    """The check is not vacuous: a renamed field, a narrowed type and a new status all fail it."""
    renamed = copy.deepcopy(server_defs)
    renamed["JobOut"]["properties"]["eta"] = renamed["JobOut"]["properties"].pop("eta_seconds")
    assert check(models.Job, "JobOut", renamed) == ["Job.eta_seconds: not in the API's schema"]

    retyped = copy.deepcopy(server_defs)
    retyped["EventOut"]["properties"]["id"] = {"type": "string"}
    assert check(models.Event, "EventOut", retyped) == ["Event.id: the API sends string, the client takes ['integer']"]

    nested = copy.deepcopy(server_defs)
    nested["ArtifactOut"]["properties"]["uri"] = {"type": "object"}
    assert check(models.Job, "JobOut", nested) == [
        "Job.artifacts[].uri: the API sends object, the client takes ['string']"
    ]

    deep = copy.deepcopy(server_defs)  # inside maps, three levels down: every place that sends it
    deep["PerplexityMetrics"]["properties"]["tokens"] = {"type": "string"}
    assert check(models.Job, "JobOut", deep) == [
        f"Job.result.{where}.perplexity{{}}.tokens: the API sends string, the client takes ['integer', 'null']"
        for where in ("base", "outputs[].metrics", "outputs[].delta")
    ]

    optional = copy.deepcopy(server_defs)
    optional["JobOut"]["required"].remove("status")
    assert check(models.Job, "JobOut", optional) == ["Job.status: required by the client, optional in the API"]
