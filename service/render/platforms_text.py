"""This machine | each emulated platform, per artifact and level, for the CLI summary."""

from __future__ import annotations

from service.schemas.report import Report


def _cov(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _kernels(k: dict[str, int]) -> str:
    return ", ".join(f"{op.split('.')[-1]} x{n}" if n > 1 else op.split(".")[-1] for op, n in sorted(k.items())) or "-"


def _db(v: float | None) -> str:
    return "exact" if v is None else f"{v:.1f} dB"


def _target_lines(host: str, name: str, p) -> list[str]:
    """A target that compiles the file itself (QNN, OpenVINO): per artifact, status, nodes taken, SQNR, latency."""
    lines = [f"{host} | {name} ({p.target}); latency on {name}: {p.latency}",
             f"  {'artifact':<14}{'status':<9}{'nodes taken':<13}{'worst SQNR (' + host + ' | ' + name + ')':<30}latency"]
    for artifact, art in p.artifacts.items():
        row = next((r for r in p.side_by_side if r.artifact == artifact), None)
        taken = f"{art.nodes_taken}/{art.nodes_total}" if art.nodes_total else "-"
        sqnr = f"{_db(row.host_sqnr_db) if row else '-'} | {_db(art.numerics.worst_sqnr_db) if art.numerics else '-'}"
        lat = f"{art.latency.median_ms:.3f} ms" if art.latency else "-"
        mark = " " if row is None or row.same else "*"
        lines.append(f" {mark}{artifact:<14}{art.status:<9}{taken:<13}{sqnr:<30}{lat}")
    lines += [f"  * {d}" for r in p.side_by_side for d in r.differences]
    return lines


def platforms_lines(report: Report) -> list[str]:
    lines: list[str] = []
    host = report.environment.cpu.arch
    for name, p in report.platforms.items():
        lines.append("")
        if p.status != "ok":
            lines.append(f"{name}: not run: {p.error.code}: {p.error.message}")
            if p.error.hint:
                lines.append(f"  hint: {p.error.hint}")
            continue
        if p.kind in ("qnn", "openvino"):
            lines += _target_lines(host, name, p)
            continue
        lines.append(f"{host} | {name} ({p.cpu}; emulated onnxruntime {p.onnxruntime}, QEMU_CPU={p.qemu_cpu}); "
                     f"latency on {name}: {p.latency}" if p.kind == "emulated" else
                     f"{host} | {name} (onnxruntime {p.onnxruntime} on this machine); latency on {name}: {p.latency}")
        lines.append(f"  {'artifact':<14}{'level':<12}{'int8 coverage':<15}fused int8 kernels ({host} | {name})")
        rules: list[str] = []
        for row in p.side_by_side:
            if row.artifact == "fp32" and row.same:
                continue
            mark = " " if row.same else "*"
            lines.append(f" {mark}{row.artifact:<14}{row.level:<12}"
                         f"{_cov(row.host_int8_coverage) + ' | ' + _cov(row.platform_int8_coverage):<15}"
                         + ("same" if row.same and row.host_kernels == row.platform_kernels else
                            f"{_kernels(row.host_kernels)} | {_kernels(row.platform_kernels)}")
                         + (f"; layout {row.host_layout_ops or '-'} | {row.platform_layout_ops or '-'}"
                            if row.host_layout_ops != row.platform_layout_ops else "")
                         + (f"; blockers only on {host}: {len(row.blockers_host_only)}" if row.blockers_host_only else "")
                         + (f"; only on {name}: {len(row.blockers_platform_only)}" if row.blockers_platform_only else ""))
            rules += [r for r in (*row.rules, *row.differences) if r not in rules]
        lines += [f"  * {r}" for r in rules]
        if p.accuracy is not None:
            lines.append(f"  accuracy on {name}: {p.accuracy.samples_run} of {p.accuracy.samples_total} eval samples in "
                         f"{p.accuracy.seconds:.1f} s (budget {p.accuracy.budget_seconds:.0f} s); SQNR against "
                         f"{p.accuracy.reference}: report.json platforms.{name}.optimized")
        if p.advice is not None:
            lines.append(f"  advice for {name}, judged on {p.advice.judged_on}")
            lines += [f"    {c}" for c in p.advice.candidates]
            if p.advice.choice:
                lines.append(f"    -> {p.advice.choice}")
    return lines
