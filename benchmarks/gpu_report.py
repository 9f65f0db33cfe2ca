"""The report of ``benchmarks/gpu_check.sh``: one Markdown page and one JSON file from its parts.

``gpu_check.sh OUT`` leaves in OUT what each step wrote -- ``environment.json`` (device,
versions), ``tests.xml`` (pytest's JUnit XML of the GPU tests), ``measurements.jsonl`` (what
the tests measured, one JSON object per line: the ``record`` fixture of tests/conftest.py),
``throughput.json`` (``bench_train_throughput.py --json``), ``steps.tsv`` (each step's exit
status and seconds) and the steps' logs -- and this
module gathers them::

    python benchmarks/gpu_report.py OUT        # writes OUT/report.md and OUT/report.json

Every failure comes with its traceback, every figure with its name; a step that produced
nothing (it crashed, or was left out) is said to have produced nothing rather than omitted.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

__all__ = ["gather", "main", "markdown"]


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _tests(path: Path) -> dict[str, Any] | None:
    """Counts and one entry per test (outcome, seconds, and the message and traceback of a failure)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    cases = []
    for case in root.iter("testcase"):
        outcome, detail = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                parts = (node.get("message", ""),) if tag == "skipped" else (node.get("message", ""), node.text or "")
                detail = "\n".join(part for part in parts if part).strip()
                break
        cases.append({"test": f"{case.get('classname', '')}::{case.get('name', '')}", "outcome": outcome,
                      "seconds": float(case.get("time", 0) or 0), "detail": detail})
    counts = {k: sum(c["outcome"] == k for c in cases) for k in ("passed", "failed", "error", "skipped")}
    return {"counts": counts, "cases": cases}


def _measurements(path: Path) -> list[dict[str, Any]] | None:
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    return [json.loads(line) for line in lines if line.strip()]


def gather(out: Path) -> dict[str, Any]:
    """Everything the check left in ``out``, as one JSON-able mapping (None: the step left nothing)."""
    return {"environment": _json(out / "environment.json"), "tests": _tests(out / "tests.xml"),
            "measurements": _measurements(out / "measurements.jsonl"), "throughput": _json(out / "throughput.json"),
            "steps": _steps(out / "steps.tsv")}


def _steps(path: Path) -> list[dict[str, Any]] | None:
    """``step<TAB>exit status<TAB>seconds`` lines, one per step the script ran."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return None
    steps = []
    for line in lines:
        name, status, seconds = line.split("\t")
        steps.append({"step": name, "status": int(status), "seconds": float(seconds)})
    return steps


def _value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return " / ".join(_value(v) for v in value)
    return str(value)


def markdown(report: dict[str, Any]) -> str:
    """The report as a Markdown page: environment, steps, tests (failures in full), figures, throughput."""
    lines = ["# spmlkit GPU check", ""]
    env = report["environment"]
    lines += ["## Environment", ""]
    if env is None:
        lines += ["(the environment step left nothing)", ""]
    else:
        lines += [f"- {k}: {_value(v)}" for k, v in env.items()] + [""]
    steps = report["steps"] or []
    if steps:
        lines += ["## Steps", "", "| step | exit status | seconds |", "|---|---:|---:|"]
        lines += [f"| {s['step']} | {s['status']} | {s['seconds']:.0f} |" for s in steps] + [""]
    lines += ["## GPU tests", ""]
    tests = report["tests"]
    if tests is None:
        lines += ["(the test step left no results: see tests.log)", ""]
    else:
        c = tests["counts"]
        lines += [f"{c['passed']} passed, {c['failed']} failed, {c['error']} errors, {c['skipped']} skipped", ""]
        lines += ["| test | outcome | seconds |", "|---|---|---:|"]
        lines += [f"| {t['test']} | {t['outcome']} | {t['seconds']:.1f} |" for t in tests["cases"]] + [""]
        for t in tests["cases"]:
            if t["outcome"] in ("failed", "error"):
                lines += [f"### {t['outcome']}: {t['test']}", "", "```", t["detail"], "```", ""]
            elif t["outcome"] == "skipped":
                lines += [f"- skipped {t['test']}: {t['detail']}"]
        lines += [""]
    lines += ["## Measured by the tests", ""]
    measured = report["measurements"]
    if not measured:
        lines += ["(none recorded)", ""]
    else:
        lines += ["| measurement | value | test |", "|---|---:|---|"]
        lines += [f"| {m['name']} | {_value(m['value'])} | {m['test']} |" for m in measured] + [""]
    lines += ["## Throughput", ""]
    throughput = report["throughput"]
    if throughput is None:
        lines += ["(the throughput step left nothing: see throughput.log)", ""]
    else:
        lines += [throughput.get("header", ""), "", throughput["table"]]
        lines += ["", f"peak host memory of the benchmark process: "
                      f"{(throughput.get('host_peak_memory_bytes') or 0) / 2**30:.1f} GiB", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="the folder gpu_check.sh wrote")
    args = parser.parse_args(argv)
    out = Path(args.out)
    report = gather(out)
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(markdown(report))
    print(f"wrote {out / 'report.md'} and {out / 'report.json'}")
    tests = report["tests"]
    failed = tests is None or tests["counts"]["failed"] + tests["counts"]["error"] > 0
    return 1 if failed or any(s["status"] != 0 for s in report["steps"] or []) else 0


if __name__ == "__main__":
    sys.exit(main())
