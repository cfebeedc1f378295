"""`nbl wait --junit FILE`: the job as a JUnit XML report, which CI systems (GitLab, Jenkins, GitHub
Actions' test reporters) show natively.

One test suite for the job (its `time` the job's, from start to end). Its test cases:
  - a failed or cancelled job: one failing case, `job`, that says why (the error, or where the cancel
    stopped it); a job failed by its gates (error.type quality) keeps its gate cases instead, which say it;
  - else one per gate check when the job has gates (job.gates .checks: {"output": "k4", "metric", "base",
    "value", "limit", "passed"}): a check that did not pass is a failure when the job failed by it, and
    `skipped` when the job succeeded with the outputs that passed (its output held back, not published): a
    green job never shows a red test;
  - else one per output (k), with each metric, the base's figure and its delta;
  - else (the job ended before its outputs were known, or the wait gave up) one for the job.
Every case carries its figures as properties (metric, value, base, limit: "none" without gates) and in
system-out, and its duration: the output's reload and evaluation (result.outputs[].seconds), the job's for `job`.
A pure function of the API's job JSON (JobOut), so a report can be rebuilt from `nbl wait --json`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from cli.client.format import readable
from cli.client.result_table import percent, rows, signed


def _case(
    suite: ET.Element,
    classname: str,
    name: str,
    seconds: float | None = None,
    props: Mapping[str, object] | None = None,
) -> ET.Element:
    case = ET.SubElement(suite, "testcase", classname=classname, name=name)
    if seconds is not None:
        case.set("time", f"{seconds:.3f}")
    if props:
        node = ET.SubElement(case, "properties")
        for key, value in props.items():
            ET.SubElement(node, "property", name=key, value=readable(value) if not isinstance(value, str) else value)
    return case


def _seconds(job: Mapping) -> float | None:
    """The job's wall time: from its start (or creation) to its end; None while it runs."""
    try:
        end = datetime.fromisoformat(str(job["finished_at"]))
        start = datetime.fromisoformat(str(job.get("started_at") or job["created_at"]))
    except (KeyError, TypeError, ValueError):
        return None
    return max((end - start).total_seconds(), 0.0)


def _why(job: Mapping) -> tuple[str, str]:
    """(type, message) of a failed or cancelled job."""
    error = job.get("error") or {}
    if job.get("status") == "failed":
        return str(error.get("type") or "failed"), f"job failed ({error.get('type')}): {error.get('message')}"
    where = (
        f" during {job['stage']} at {job.get('progress', 0) * 100:.0f}%" if job.get("stage") else " before it started"
    )
    by = " by request" if job.get("cancel_requested") else ""
    return "cancelled", f"job cancelled{by}{where}; no output was published"


def _output_case(suite: ET.Element, classname: str, output: Mapping, base: Mapping | None, job: Mapping) -> None:
    props: dict[str, object] = {"layers": str(output.get("layers")), "limit": "none (the job has no gates)"}
    recipe = "/".join(str(output.get(f)) for f in ("mode", "method", "criterion"))
    lines = [f"layers {output.get('layers')} ({recipe}, {output.get('form') or 'nbl'} form)"]  # the form: where it runs
    for label, get in rows({"base": base, "outputs": [output]}):
        props[label], props[f"{label} base"] = get(output.get("metrics")), get(base)
        lines.append(
            f"{label}: {readable(get(output.get('metrics')))} (base {readable(get(base))}, "
            f"{signed(get(output.get('delta')))}, {percent(get(output.get('relative')))})"
        )
    case = _case(suite, classname, f"k{output.get('k')}", output.get("seconds"), props)
    if job.get("status") not in ("succeeded", "failed", "cancelled"):
        ET.SubElement(case, "error", message=f"job still {job.get('status')}", type="not-finished")
    ET.SubElement(case, "system-out").text = "\n".join(lines + ["limit: none (the job has no gates)"])


def _gate_case(
    suite: ET.Element, classname: str, check: Mapping, outputs: Mapping[str, Mapping], published: list[str] | None
) -> None:
    """`published`: the outputs the job published (it succeeded), so a failed check's output was held back."""
    out = check.get("output")
    name = f"k{out}" if isinstance(out, int) else str(out)
    text = (
        f"{check.get('metric')} = {readable(check.get('value'))} (base {readable(check.get('base'))}, limit "
        f"{readable(check.get('limit'))}: {check.get('gate')} {readable(check.get('allowed'))})"
    )
    case = _case(
        suite,
        classname,
        f"{name} {check.get('metric')}",
        (outputs.get(name) or {}).get("seconds"),
        {k: check.get(k) for k in ("metric", "value", "base", "limit", "gate", "allowed")},
    )
    if not check.get("passed"):
        beyond = (
            f"{check.get('metric')} = {readable(check.get('value'))} beyond its limit "
            f"{readable(check.get('limit'))} (base {readable(check.get('base'))})"
        )
        if published is None:
            ET.SubElement(case, "failure", type="gate", message=beyond)
        else:
            who, _, copy = name.partition("+")  # a quantized copy's ("k4+w4a16") failed check holds its output back
            why = f"its {copy} copy's {beyond}" if copy else beyond
            held = f"{who} held back, not published: {why}; the job published {', '.join(published)}"
            ET.SubElement(case, "skipped", message=held)
            text = f"{held}\n{text}"
    ET.SubElement(case, "system-out").text = text


def junit_xml(job: Mapping) -> str:
    jid = str(job.get("id"))
    result = job.get("result") or {}
    classname = f"nbl.{jid}"
    suite = ET.Element("testsuite", name=f"nbl job {jid}")
    if job.get("created_at"):
        suite.set("timestamp", str(job["created_at"]))
    if _seconds(job) is not None:
        suite.set("time", f"{_seconds(job):.3f}")
    props = ET.SubElement(suite, "properties")
    for key, value in (
        ("job_id", jid),
        ("status", job.get("status")),
        ("model", ((job.get("spec") or {}).get("model") or {}).get("id")),
    ):
        ET.SubElement(props, "property", name=key, value=str(value))
    checks = ((result.get("gates") or job.get("gates") or {}).get("checks")) or []
    outputs = result.get("outputs") or []
    quality = job.get("status") == "failed" and (job.get("error") or {}).get("type") == "quality" and checks
    if job.get("status") in ("failed", "cancelled") and not quality:
        kind, message = _why(job)
        case = _case(suite, classname, "job", _seconds(job), {"stage": str(job.get("stage")), "reason": kind})
        ET.SubElement(case, "failure", type=kind, message=message)
    elif checks:
        by_name = {f"k{o.get('k')}": o for o in outputs}
        failed = {str(c.get("output")).partition("+")[0] for c in checks if not c.get("passed")}  # "k4+w4a16": k4's
        names = list(dict.fromkeys(str(c.get("output")).partition("+")[0] for c in checks))
        published = [n for n in names if n not in failed] if job.get("status") == "succeeded" else None
        for c in checks:
            _gate_case(suite, classname, c, by_name, published)
    elif outputs:
        for o in outputs:
            _output_case(suite, classname, o, result.get("base"), job)
    else:
        case = _case(suite, classname, "job", _seconds(job))
        if job.get("status") != "succeeded":
            ET.SubElement(case, "error", message=f"job still {job.get('status')}", type="not-finished")
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    for tag, attr in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
        suite.set(attr, str(sum(c.find(tag) is not None for c in cases)))
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def unreachable_xml(job_id: str, message: str) -> str:
    """The report when the wait gave up (exit 3 or 4): one errored case, so CI still shows why."""
    suite = ET.Element("testsuite", name=f"nbl job {job_id}", tests="1", failures="0", errors="1", skipped="0")
    case = _case(suite, f"nbl.{job_id}", "job")
    ET.SubElement(case, "error", type="wait", message=message)
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
