"""Where the targets' runtimes live and whether one is set up: each is a folder of PyPI wheels that `make`
unpacked (``pip install --target``), put in front of this interpreter's own packages in a child process.

    <root>/ort-<version>/   onnxruntime==<version>                (a release: it shadows the host's onnxruntime)
    <root>/qnn/             onnxruntime-qnn (a plugin EP for the host's onnxruntime, with Qualcomm's QNN libraries)
    <root>/openvino/        openvino (its CPU plugin)

``<root>`` is ``QUANTCOMPARE_TARGETS_ROOT``, else ``targets/`` in the environment the service runs from
(.venv). ``QUANTCOMPARE_ORT_RELEASES`` (comma-separated) lists the ORT releases offered; unset, every
``ort-<version>`` folder that holds its ``ready`` mark.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from service.errors import PlatformUnavailable
from service.pipeline.ort.targets import Platform

__all__ = ["ort_releases", "site_for", "targets_root"]

MAKE_SWITCH = {"qnn": "QNN=0", "openvino": "OPENVINO=0", "ort": "ORT_RELEASES="}


def targets_root() -> Path:
    return Path(os.environ.get("QUANTCOMPARE_TARGETS_ROOT") or Path(sys.prefix) / "targets")


def ort_releases(root: Path | None = None) -> list[str]:
    """The ORT releases a job may name as ``ort:<version>``."""
    listed = os.environ.get("QUANTCOMPARE_ORT_RELEASES")
    if listed is not None:
        return [v.strip() for v in listed.split(",") if v.strip()]
    root = root or targets_root()
    return sorted(p.name[4:] for p in root.glob("ort-*") if (p / "ready").exists()) if root.is_dir() else []


def _folder(platform: Platform) -> str:
    return f"ort-{platform.version}" if platform.kind == "ort" else platform.kind


def _setup_hint(platform: Platform) -> str:
    if platform.kind == "ort":
        return (f"run `make ORT_RELEASES={platform.version}` (it installs that release under .venv/targets), and list "
                f"it in QUANTCOMPARE_ORT_RELEASES when that is set")
    return f"run `make` (it installs the {platform.kind} target under .venv/targets; `make {MAKE_SWITCH[platform.kind]}` " \
           "leaves it out), or set QUANTCOMPARE_TARGETS_ROOT to a folder that holds it"


def site_for(platform: Platform, root: Path | None = None) -> Path:
    """The folder to put first on the child's ``PYTHONPATH``; PlatformUnavailable when it is not set up."""
    root = Path(root) if root is not None else targets_root()
    if platform.kind == "ort" and platform.version not in ort_releases(root):
        raise PlatformUnavailable(
            f"{platform.name}: onnxruntime {platform.version} is not installed on this server "
            f"(installed: {', '.join(ort_releases(root)) or 'none'})", hint=_setup_hint(platform), platform=platform.name)
    site = root / _folder(platform)
    if not (site / "ready").exists():
        raise PlatformUnavailable(f"{platform.name}: the {platform.kind} runtime is not set up on this server "
                                  f"({site} has no ready mark)", hint=_setup_hint(platform), platform=platform.name)
    return site
