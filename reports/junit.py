"""The regression gate as JUnit XML: one test case per trace and figure, so a CI system shows
each regressed figure by name (classname = the trace, name = the figure). A trace that could
not be analysed (or has no baseline) is one test case, `analysis`, with an error."""
from __future__ import annotations

import xml.etree.ElementTree as ET

from scsitrace import outputs
from scsitrace.inert import xml_text
from .regress import UNIT


def _fmt(kind: str, v) -> str:
    return "-" if v is None else f"{v:.6g}{UNIT[kind]}"


def document(checks: list[dict], name: str = "scsitrace regress") -> ET.ElementTree:
    """checks: [{"key", "trace", "rows": [compare rows] or None, "error": str or None}]."""
    suites = ET.Element("testsuites", name=name)
    suite = ET.SubElement(suites, "testsuite", name=name)
    tests = failures = errors = 0
    for check in checks:
        if check.get("rows") is None:
            tests += 1
            errors += 1
            case = ET.SubElement(suite, "testcase", classname=xml_text(check["key"]), name="analysis", time="0")
            ET.SubElement(case, "error", type=check.get("status") or "error",
                          message=xml_text(check.get("error") or "not analysed")).text = xml_text(check.get("error"))
            continue
        for row in check["rows"]:
            tests += 1
            case = ET.SubElement(suite, "testcase", classname=xml_text(check["key"]), name=xml_text(row["figure"]),
                                 time="0")
            text = (f"baseline {_fmt(row['kind'], row['baseline'])}, current {_fmt(row['kind'], row['current'])}, "
                    f"tolerance {row['tolerance']}: {row['verdict']}")
            if row["verdict"] in ("regressed", "missing"):
                failures += 1
                ET.SubElement(case, "failure", type=row["verdict"], message=text).text = \
                    xml_text(f"{check['trace']}: {text}")
            elif row["verdict"] != "ok":
                ET.SubElement(case, "system-out").text = text
    for el in (suites, suite):
        el.set("tests", str(tests))
        el.set("failures", str(failures))
        el.set("errors", str(errors))
    ET.indent(suites)
    return ET.ElementTree(suites)


def write(path: str, checks: list[dict]) -> None:
    with outputs.writing(path, "wb") as fh:
        document(checks).write(fh, encoding="utf-8", xml_declaration=True)
