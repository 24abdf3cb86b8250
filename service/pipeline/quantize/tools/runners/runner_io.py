"""What every runner reads and writes: the request JSON, the calibration samples, the result JSON."""

from __future__ import annotations

import json
import sys

import numpy as np


def read_request() -> dict:
    with open(sys.argv[1], encoding="utf-8") as f:
        return json.load(f)


def calibration_feeds(request: dict) -> list[dict]:
    """The job's calibration samples, one feed (input name -> array) per sample, in the job's order."""
    data = np.load(request["calibration"])
    names = request["input_names"]
    return [{name: data[f"s{i}_{k}"] for k, name in enumerate(names)} for i in range(request["samples"])]


def write_result(request: dict, *, version: str, settings: dict, not_matched: list[str], calibration: str,
                 notes: list[str] | None = None) -> None:
    with open(request["result"], "w", encoding="utf-8") as f:
        json.dump({"version": version, "settings": settings, "not_matched": not_matched,
                   "calibration": calibration, "notes": notes or []}, f)


def unmatched_settings(settings: dict, tool_has: dict) -> list[str]:
    """The job's resolved ORT settings the tool cannot follow: ``tool_has`` maps a setting to the value the
    tool uses; each one that differs from the job's is listed."""
    out = []
    for key, value in tool_has.items():
        if key in settings and settings[key] is not None and settings[key] != value:
            out.append(f"{key}={settings[key]!r} asked, the tool uses {value!r}")
    return out
