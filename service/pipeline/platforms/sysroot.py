"""Set-up of the arm64 runtime: qemu-user, a Debian arm64 sysroot with Python 3.11, and PyPI's
aarch64 wheels of the onnxruntime, numpy and onnx the service itself runs (same versions).

    python -m service.pipeline.platforms.sysroot ROOT     # what `make` runs; idempotent

Everything lands under ROOT (``.venv/arm64`` by default): ``sysroot/`` (the .debs unpacked with
``dpkg -x``, the wheels unpacked into ``usr/lib/python3/dist-packages``, which Debian's python3.11
has on its path), ``cpus/<QEMU_CPU>/`` (one view of the sysroot per emulated CPU) and
``ready.json`` (versions, seconds, bytes). A job needs no network: it reads ROOT only.

The one trap: ORT's bundled cpuinfo (pytorch/cpuinfo) parses ``/proc/cpuinfo`` at start-up and
crashes on the host's x86 text, which qemu 7.2 passes through. ``qemu -L`` looks an absolute path
up under the sysroot first, so each CPU's view holds an ARM-style ``proc/cpuinfo``: the MIDR read
from the emulated CPU (``mrs x0, midr_el1``, which qemu-user answers) and the features from the
auxiliary vector (AT_HWCAP, AT_HWCAP2) that qemu gives the emulated process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from importlib import metadata
from pathlib import Path

__all__ = ["DEBS", "QEMU", "cpu_root", "cpuinfo_text", "default_root", "ready_file", "set_up"]

QEMU = "qemu-aarch64-static"
QEMU_PACKAGE = "qemu-user-static"
# python3.11 and what it and ORT's .so files link against (apt-cache depends --recurse, without
# the tools a package manager needs: dpkg, tar, perl, install-info, readline-common).
DEBS = ("python3.11", "python3.11-minimal", "libpython3.11-minimal", "libpython3.11-stdlib", "libc6", "libgcc-s1",
        "libstdc++6", "gcc-12-base", "libcrypt1", "zlib1g", "libexpat1", "libffi8", "libbz2-1.0", "liblzma5",
        "libssl3", "libsqlite3-0", "libncursesw6", "libtinfo6", "libreadline8", "libuuid1", "libnsl2", "libtirpc3",
        "libdb5.3", "libgssapi-krb5-2", "libk5crypto3", "libkeyutils1", "libkrb5-3", "libkrb5support0",
        "libcom-err2")
# The Python packages the emulated interpreter imports, at the versions installed natively.
WHEELS = ("onnxruntime", "numpy", "onnx", "protobuf", "ml_dtypes", "typing_extensions")
PLATFORM_TAGS = ("manylinux_2_28_aarch64", "manylinux_2_27_aarch64", "manylinux_2_26_aarch64",
                 "manylinux_2_17_aarch64", "manylinux2014_aarch64", "any")
CPUS = ("neoverse-n1", "max,sme=off", "cortex-a53")
SITE = "usr/lib/python3/dist-packages"

# Linux's arch/arm64 hwcap bits, in order, as /proc/cpuinfo names them (arch/arm64/kernel/cpuinfo.c).
HWCAP_NAMES = ("fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc "
               "dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg").split()
HWCAP2_NAMES = ("dcpodp sve2 sveaes svepmull svebitperm svesha3 svesm4 flagm2 frint svei8mm svef32mm svef64mm "
                "svebf16 i8mm bf16 dgh rng bti mte ecv afp rpres mte3 sme smei16i64 smef64f64 smei8i32 smef16f32 "
                "smeb16f32 smef32f32 smefa64 wfxt ebf16").split()

# Runs inside the emulated interpreter (stdlib only): MIDR_EL1 and the auxiliary vector.
_PROBE = r"""
import ctypes, json, mmap, struct
buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
buf.write(struct.pack("<II", 0xd5380000, 0xd65f03c0))  # mrs x0, midr_el1; ret
midr = ctypes.CFUNCTYPE(ctypes.c_uint64)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))()
aux = dict(struct.iter_unpack("<QQ", open("/proc/self/auxv", "rb").read()))
print(json.dumps({"midr": midr, "hwcap": aux.get(16, 0), "hwcap2": aux.get(26, 0)}))
"""


def default_root() -> Path:
    """``QUANTCOMPARE_ARM64_ROOT``, else ``arm64/`` in the environment the service runs from (.venv)."""
    return Path(os.environ.get("QUANTCOMPARE_ARM64_ROOT") or Path(sys.prefix) / "arm64")


def ready_file(root: Path) -> Path:
    return root / "ready.json"


def cpu_root(root: Path, qemu_cpu: str) -> Path:
    return root / "cpus" / qemu_cpu.replace(",", "_").replace("=", "-")


def cpuinfo_text(midr: int, hwcap: int, hwcap2: int, processors: int) -> str:
    """/proc/cpuinfo as arm64 Linux writes it, for ``processors`` identical cores."""
    features = [n for i, n in enumerate(HWCAP_NAMES) if hwcap >> i & 1]
    features += [n for i, n in enumerate(HWCAP2_NAMES) if hwcap2 >> i & 1]
    block = (f"BogoMIPS\t: 50.00\nFeatures\t: {' '.join(features)}\nCPU implementer\t: {midr >> 24 & 0xff:#04x}\n"
             f"CPU architecture: 8\nCPU variant\t: {midr >> 20 & 0xf:#x}\nCPU part\t: {midr >> 4 & 0xfff:#05x}\n"
             f"CPU revision\t: {midr & 0xf}\n\n")
    return "".join(f"processor\t: {i}\n{block}" for i in range(processors))


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def _apt_ready() -> None:
    """qemu-user-static installed, and apt able to fetch arm64 packages (needs root, as `make system-deps`)."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    arm64_known = "arm64" in _run(["dpkg", "--print-foreign-architectures"]).stdout.split()
    if not arm64_known:
        _run(["dpkg", "--add-architecture", "arm64"])
    if not arm64_known or shutil.which(QEMU) is None:
        _run(["apt-get", "update", "-qq"], env=env)
    if shutil.which(QEMU) is None:
        _run(["apt-get", "install", "-y", "-qq", QEMU_PACKAGE], env=env)


def _debs(work: Path, sysroot: Path) -> int:
    debs = work / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    os.chmod(debs, 0o777)  # apt's _apt user writes the downloads
    _run(["apt-get", "download", "-qq", *(f"{d}:arm64" for d in DEBS)], cwd=debs)
    files = sorted(debs.glob("*.deb"))
    for deb in files:
        _run(["dpkg", "-x", str(deb), str(sysroot)])
    return len(files)


def _wheels(work: Path, sysroot: Path) -> dict[str, str]:
    versions = {name: metadata.version(name) for name in WHEELS}
    wheels = work / "wheels"
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--no-deps", "--python-version",
           "3.11", "--implementation", "cp", "-d", str(wheels)]
    for tag in PLATFORM_TAGS:
        cmd += ["--platform", tag]
    _run(cmd + [f"{n}=={v}" for n, v in versions.items()])
    site = sysroot / SITE
    site.mkdir(parents=True, exist_ok=True)
    for whl in sorted(wheels.glob("*.whl")):
        with zipfile.ZipFile(whl) as z:
            z.extractall(site)
    return versions


def _cpu_views(root: Path, sysroot: Path) -> dict[str, dict]:
    """One directory per QEMU_CPU: the sysroot's top-level entries as symlinks, and its own proc/cpuinfo."""
    probes = {}
    processors = os.cpu_count() or 1
    for cpu in CPUS:
        view = cpu_root(root, cpu)
        shutil.rmtree(view, ignore_errors=True)
        (view / "proc").mkdir(parents=True)
        for entry in sysroot.iterdir():
            (view / entry.name).symlink_to(os.path.relpath(entry, view))
        out = _run([QEMU, "-L", str(sysroot), str(sysroot / "usr/bin/python3.11"), "-c", _PROBE],
                   env={"QEMU_CPU": cpu, "PATH": os.environ.get("PATH", "")}, timeout=300)
        probe = json.loads(out.stdout)
        (view / "proc" / "cpuinfo").write_text(cpuinfo_text(probe["midr"], probe["hwcap"], probe["hwcap2"], processors))
        probes[cpu] = probe
    return probes


def _tree_bytes(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def set_up(root: Path) -> dict:
    """The arm64 runtime under ``root``, made from nothing; kept when ready.json matches the native versions."""
    root = Path(root)
    ready = ready_file(root)
    want = {name: metadata.version(name) for name in WHEELS}
    if ready.exists():
        done = json.loads(ready.read_text())
        if done.get("wheels") == want and shutil.which(QEMU):
            return done
    t0 = time.perf_counter()
    _apt_ready()
    t_apt = time.perf_counter() - t0
    shutil.rmtree(root, ignore_errors=True)
    sysroot = root / "sysroot"
    sysroot.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="qc-arm64-") as tmp:
        work = Path(tmp)
        os.chmod(work, 0o755)
        t1 = time.perf_counter()
        debs = _debs(work, sysroot)
        t_debs = time.perf_counter() - t1
        sys_bytes = _tree_bytes(sysroot)
        t2 = time.perf_counter()
        versions = _wheels(work, sysroot)
        t_wheels = time.perf_counter() - t2
    t3 = time.perf_counter()
    probes = _cpu_views(root, sysroot)
    qemu_version = _run([QEMU, "--version"]).stdout.splitlines()[0]
    done = {"wheels": versions, "debs": debs, "qemu": qemu_version, "cpus": probes,
            "seconds": {"apt": round(t_apt, 1), "debs": round(t_debs, 1), "wheels": round(t_wheels, 1),
                        "cpuinfo": round(time.perf_counter() - t3, 1), "total": round(time.perf_counter() - t0, 1)},
            "bytes": {"debs_unpacked": sys_bytes, "sysroot": _tree_bytes(sysroot)}}
    ready.write_text(json.dumps(done, indent=1))
    return done


if __name__ == "__main__":
    print(json.dumps(set_up(Path(sys.argv[1]) if len(sys.argv) > 1 else default_root()), indent=1))
