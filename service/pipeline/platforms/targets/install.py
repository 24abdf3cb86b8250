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
import shutil
import subprocess
import sys
from pathlib import Path

from service.errors import PlatformUnavailable
from service.pipeline.ort.targets import Platform

__all__ = ["WHEELS", "install", "ort_releases", "site_for", "targets_root"]

# What each target's folder holds (measured sizes on disk, x86-64): QNN 245 MB, OpenVINO 180 MB, a release 51 MB.
# --no-deps: each runs on this environment's numpy (and, for QNN, its onnxruntime); nothing else is imported.
WHEELS = {"qnn": "onnxruntime-qnn==2.7.0", "openvino": "openvino==2026.4.1"}
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


def _wheel(folder: str) -> str:
    return f"onnxruntime=={folder[4:]}" if folder.startswith("ort-") else WHEELS[folder]


def install(root: Path, folders: list[str]) -> list[str]:
    """Each folder ("qnn", "openvino", "ort-1.22.1") not yet ready, installed from PyPI with this interpreter's pip;
    the ones installed. Idempotent: a folder keeps its ``ready`` mark until removed."""
    done = []
    for folder in folders:
        site = Path(root) / folder
        if (site / "ready").exists():
            continue
        shutil.rmtree(site, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), _wheel(folder)],
                       check=True)
        (site / "ready").write_text(_wheel(folder) + "\n")
        done.append(folder)
    return done


if __name__ == "__main__":  # python -m service.pipeline.platforms.targets.install ROOT qnn openvino ort-1.22.1
    print(" ".join(install(Path(sys.argv[1]), sys.argv[2:])) or "nothing to install")
