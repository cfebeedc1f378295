"""`nbl wait --junit FILE`: the job as a JUnit XML report, which CI systems (GitLab, Jenkins, GitHub
Actions' test reporters) show natively.

One test suite for the job. Its test cases:
  - one per gate check when the job has gates (job.gates, or result.gates, .checks: {"output": "k4",
    "metric", "base", "value", "limit", "passed"}), failed when the check did not pass;
  - else one per output (k), failed when the job failed, skipped when it was cancelled, with the
    output's metrics and deltas in system-out;
  - else (the job ended before its outputs were known, or the wait gave up) one for the job.
A pure function of the API's job JSON (JobOut), so a report can be rebuilt from `nbl wait --json`.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping
from pathlib import Path

from cli.client_format import readable
from cli.result_table import percent, rows, signed


def _case(suite: ET.Element, classname: str, name: str, seconds: float | None = None) -> ET.Element:
    case = ET.SubElement(suite, "testcase", classname=classname, name=name)
    if seconds is not None:
        case.set("time", f"{seconds:.3f}")
    return case


def _verdict(case: ET.Element, job: Mapping) -> None:
    """Mark a case by how the job ended: failed (with the job's error), cancelled (skipped), or not over."""
    status, error = job.get("status"), job.get("error") or {}
    if status == "failed":
        ET.SubElement(case, "failure", message=f"job failed ({error.get('type')}): {error.get('message')}",
                      type=str(error.get("type") or "failed"))
    elif status == "cancelled":
        ET.SubElement(case, "skipped", message="job cancelled")
    elif status != "succeeded":
        ET.SubElement(case, "error", message=f"job still {status}", type="not-finished")


def _output_text(output: Mapping, base: Mapping | None) -> str:
    lines = [f"layers {output.get('layers')} ({output.get('mode')}/{output.get('method')}/{output.get('criterion')})"]
    for label, get in rows({"base": base, "outputs": [output]}):
        lines.append(f"{label}: {readable(get(output.get('metrics')))} (base {readable(get(base))}, "
                     f"{signed(get(output.get('delta')))}, {percent(get(output.get('relative')))})")
    return "\n".join(lines)


def junit_xml(job: Mapping) -> str:
    jid = str(job.get("id"))
    result = job.get("result") or {}
    classname = f"nbl.{jid}"
    suite = ET.Element("testsuite", name=f"nbl job {jid}")
    props = ET.SubElement(suite, "properties")
    for key, value in (("job_id", jid), ("status", job.get("status")),
                       ("model", ((job.get("spec") or {}).get("model") or {}).get("id"))):
        ET.SubElement(props, "property", name=key, value=str(value))
    checks = ((result.get("gates") or job.get("gates") or {}).get("checks")) or []
    outputs = result.get("outputs") or []
    if checks:
        for c in checks:
            out = c.get("output")
            case = _case(suite, classname, f"{f'k{out}' if isinstance(out, int) else out} {c.get('metric')}")
            if not c.get("passed"):
                ET.SubElement(case, "failure", type="gate",
                              message=f"{c.get('metric')} = {readable(c.get('value'))} beyond its limit "
                              f"{readable(c.get('limit'))} (base {readable(c.get('base'))})")
    elif outputs:
        for o in outputs:
            case = _case(suite, classname, f"k{o.get('k')}")
            _verdict(case, job)
            ET.SubElement(case, "system-out").text = _output_text(o, result.get("base"))
    else:
        _verdict(_case(suite, classname, "job"), job)
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
