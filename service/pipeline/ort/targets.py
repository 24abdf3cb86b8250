"""The platforms a job can ask for: the machine it runs on, or arm64 as ONNX Runtime emulated.

A platform decides two rules of ORT's graph optimizer that the report reads back from the graphs
(ORT 1.32's source):

- ``int8_allowed``: ``QDQIsInt8Allowed()`` (qdq_selectors.h / qdq_transformer utils) is true on
  ARM (``MLAS_TARGET_ARM_ANY``) and false elsewhere; where it is false, Level2 first runs
  ``QDQS8ToU8Transformer`` and the Conv/MatMul selectors refuse int8 activations.
- ``nchwc``: ``NchwcTransformer`` is registered at Level3 only when ``MlasNchwcGetBlockSize() > 1``,
  which holds on x86-64 only.

An emulated platform is ``qemu-aarch64-static`` with a named CPU (``QEMU_CPU``). Plain ``max``
advertises SME, which changes the fp32 graph (NHWC FusedConv), so the i8mm target is
``max,sme=off``.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.errors import InvalidOptions
from service.schemas.options import (EMULATED_PLATFORMS, QDQ_IS_INT8_ALLOWED, QNN_DEFAULT_SOC, TARGET_PLATFORM_RE,
                                     host_platform_name)

__all__ = ["ARM_ARCHES", "EMULATED", "Platform", "host_platform", "int8_allowed_in", "platform_from_name"]

ARM_ARCHES = ("aarch64", "arm64", "ARM64")


@dataclass(frozen=True)
class Platform:
    name: str  # as the request names it: "x86_64", "arm64", "arm64:cortex-a53"
    arch: str  # "x86_64" | "aarch64"
    emulated: bool
    qemu_cpu: str | None  # QEMU_CPU for an emulated platform
    cpu_label: str  # what the report calls the CPU
    int8_allowed: bool  # QDQIsInt8Allowed()
    nchwc: bool  # NchwcTransformer registered (MlasNchwcGetBlockSize() > 1)
    # "host", "emulated" (arm64 under qemu), or a target: "ort" (another ORT release), "qnn", "openvino"
    kind: str = "host"
    version: str | None = None  # ort:<version>
    soc: str | None = None  # qnn:<soc_model>

    @property
    def slug(self) -> str:
        """The name as a file name part: "qnn:69" -> "qnn_69", "ort:1.22.1" -> "ort_1.22.1"."""
        return self.name.replace(":", "_")


# name -> (QEMU_CPU, the CPU it stands for)
EMULATED = {
    "arm64": ("neoverse-n1", "Neoverse N1 (dotprod; like Graviton2, Ampere Altra)"),
    "arm64:neoverse-n1": ("neoverse-n1", "Neoverse N1 (dotprod; like Graviton2, Ampere Altra)"),
    "arm64:i8mm": ("max,sme=off", "qemu max without SME (i8mm, SVE)"),
    "arm64:cortex-a53": ("cortex-a53", "Cortex-A53 (plain NEON)"),
}
assert set(EMULATED) == set(EMULATED_PLATFORMS)


def _rules(arch: str) -> tuple[bool, bool]:
    return arch in ARM_ARCHES, arch in ("x86_64", "AMD64")


def host_platform() -> Platform:
    arch = host_platform_name()
    int8_allowed, nchwc = _rules(arch)
    return Platform(name=arch, arch=arch, emulated=False, qemu_cpu=None, cpu_label="this machine",
                    int8_allowed=int8_allowed, nchwc=nchwc)


def int8_allowed_in(session_config: dict[str, str] | None, default: bool | None = None) -> bool:
    """Whether ORT's QDQ selectors take int8 activations in a session with ``session_config``: ORT reads
    ``session.qdqisint8allowed`` with QDQIsInt8Allowed() (``default``, the platform's; this machine's when
    None) as its default and takes "1" as true, any other value as false (graph_transformer_utils.cc, Level2)."""
    value = (session_config or {}).get(QDQ_IS_INT8_ALLOWED)
    if value is not None:
        return value == "1"
    return host_platform().int8_allowed if default is None else default


def platform_from_name(name: str) -> Platform:
    """``arm64``, ``arm64:i8mm``, ``arm64:cortex-a53``, ``arm64:neoverse-n1`` or the host's own name."""
    host = host_platform()
    if name == host.name or (host.arch in ARM_ARCHES and name == "arm64"):
        return host
    if TARGET_PLATFORM_RE.match(name):
        return _target(name, host)
    if name in EMULATED:
        cpu, label = EMULATED[name]
        int8_allowed, nchwc = _rules("aarch64")
        return Platform(name=name, arch="aarch64", emulated=True, qemu_cpu=cpu, cpu_label=label,
                        int8_allowed=int8_allowed, nchwc=nchwc, kind="emulated")
    raise InvalidOptions(f"unknown platform {name!r}",
                         hint=f"use {host.name!r} (this machine) or one of {', '.join(sorted(EMULATED))}")


def _target(name: str, host: Platform) -> Platform:
    """A target on this machine's CPU: ORT's rules are the host's (an ORT release), or do not apply (QNN,
    OpenVINO compile the file themselves)."""
    kind, _, arg = name.partition(":")
    if kind == "qnn":
        soc = arg or QNN_DEFAULT_SOC
        return Platform(name=name, arch="hexagon", emulated=True, qemu_cpu=None, kind="qnn", soc=soc,
                        cpu_label=f"Qualcomm HTP, soc_model {soc} (emulated on this CPU by the QNN EP)",
                        int8_allowed=host.int8_allowed, nchwc=host.nchwc)
    if kind == "openvino":
        return Platform(name=name, arch=host.arch, emulated=False, qemu_cpu=None, kind="openvino",
                        cpu_label="this machine, OpenVINO CPU plugin", int8_allowed=host.int8_allowed, nchwc=host.nchwc)
    return Platform(name=name, arch=host.arch, emulated=False, qemu_cpu=None, kind="ort", version=arg,
                    cpu_label=f"this machine, onnxruntime {arg}", int8_allowed=host.int8_allowed, nchwc=host.nchwc)
