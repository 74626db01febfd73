"""JUnit XML per tier, for CI systems: one testsuite per stage, one testcase per case.

pass -> a plain testcase; fail -> <failure>; error / timeout / oom / crash -> <error> (its type
is the status, the message the reason or exception); skipped / not_attempted -> <skipped> with
the reason. Written as ``junit-<tier>.xml`` into the run directory.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pandas as pd

from harness.outcomes import UNFINISHED

_ERRORS = {s.value for s in UNFINISHED}
_BAD_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")  # not allowed in XML 1.0


def _clean(value: object) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return ""
    return _BAD_XML.sub("?", str(value))


def tier_xml(results: pd.DataFrame, tier: str) -> ET.ElementTree:
    rows = results[results["tier"] == tier]
    root = ET.Element("testsuites", name=f"harness.{tier}")
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    total_time = 0.0
    for stage, g in rows.groupby("stage", sort=False):
        suite = ET.SubElement(root, "testsuite", name=f"{tier}.{stage}")
        counts = dict.fromkeys(totals, 0)
        suite_time = 0.0
        for rec in g.sort_values("case_id").itertuples(index=False):
            seconds = float(rec.seconds) if rec.seconds == rec.seconds and rec.seconds is not None else 0.0
            suite_time += seconds
            case = ET.SubElement(suite, "testcase", classname=f"{tier}.{stage}", name=_clean(rec.case_id),
                                 time=f"{seconds:.3f}")
            counts["tests"] += 1
            why = _clean(rec.reason) or _clean(rec.error_class)
            text = "\n".join(x for x in (_clean(rec.error_class), _clean(rec.message)) if x)
            if rec.status == "fail":
                counts["failures"] += 1
                ET.SubElement(case, "failure", message=why or "fail", type="fail").text = text
            elif rec.status in _ERRORS:
                counts["errors"] += 1
                ET.SubElement(case, "error", message=why or rec.status, type=rec.status).text = text
            elif rec.status in ("skipped", "not_attempted"):
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=f"{rec.status}: {why}")
        suite.set("time", f"{suite_time:.3f}")
        for k, v in counts.items():
            suite.set(k, str(v))
            totals[k] += v
        total_time += suite_time
    for k, v in totals.items():
        root.set(k, str(v))
    root.set("time", f"{total_time:.3f}")
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(results: pd.DataFrame, out_dir: str | os.PathLike) -> dict[str, Path]:
    """Write junit-<tier>.xml for every tier in results; return {tier: path}."""
    out = {}
    for tier in sorted(results["tier"].unique()):
        path = Path(out_dir) / f"junit-{tier}.xml"
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tier_xml(results, tier).write(tmp, encoding="utf-8", xml_declaration=True)
        os.replace(tmp, path)
        out[str(tier)] = path
    return out
