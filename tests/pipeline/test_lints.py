"""Lints from file facts and per-level summaries, for CPUs other than this one."""

from __future__ import annotations

import pytest

from service.pipeline.runtime.levels import FileFacts
from service.pipeline.verdict.lints import lints_for
from service.pipeline.options import ComparisonOptions
from service.schemas.levels import OptimizedLevel
from service.schemas.report import CpuInfo

AVX2_NO_VNNI = CpuInfo(arch="x86_64", isa={"avx2": True, "avx512_vnni": False, "avx_vnni": False})
VNNI = CpuInfo(arch="x86_64", isa={"avx2": True, "avx512_vnni": True})
ARM = CpuInfo(arch="aarch64", isa={"neon": True, "dotprod": True})


def _facts(*, opset=17, per_channel=True, zp_equal=True, acts=("int8",), kernels=None):
    w = {"name": "w", "dtype": "int8", "consumer": "Conv", "per_channel": per_channel, "symmetric": zp_equal,
         "zero_points_equal": zp_equal}
    return FileFacts(opset=opset, op_histogram={}, bias_summary="int32", weights=[w], activation_dtypes=list(acts),
                     int8_kernels=kernels or {}, transposes=0)


def _levels(u8=True):
    return {"all": OptimizedLevel(level="all", node_count=3, compute_ops_fp32=1, compute_ops_int8=1,
                                  int8_coverage=1.0, kernel_activation_dtypes={"uint8" if u8 else "int8": 1})}


def _codes(name, facts, levels, cpu, **opts):
    return [lint.code for lint in lints_for(names=["fp32", name], files={name: facts}, optimized={name: levels},
                                           options=ComparisonOptions(**opts), cpu=cpu)]


@pytest.mark.parametrize("cpu,expected", [(AVX2_NO_VNNI, True), (VNNI, False), (ARM, False)],
                         ids=["avx2 without vnni warns", "vnni does not", "arm does not"])
def test_u8s8_saturation_only_without_vnni(cpu, expected):
    assert ("u8s8_saturation_without_vnni" in _codes("ort_qdq", _facts(), _levels(), cpu)) is expected


def test_reduce_range_silences_the_saturation_lint():
    assert "u8s8_saturation_without_vnni" not in _codes("ort_qdq", _facts(), _levels(), AVX2_NO_VNNI,
                                                        ort={"reduce_range": True})


def test_per_channel_below_opset_13_is_an_error():
    lints = lints_for(names=["pt2e_qdq"], files={"pt2e_qdq": _facts(opset=11)}, optimized={"pt2e_qdq": _levels()},
                      options=ComparisonOptions(), cpu=VNNI)
    lint = next(x for x in lints if x.code == "per_channel_below_opset_13")
    assert lint.severity == "error" and "opset" in lint.hint


def test_asymmetric_per_channel_conv_weights():
    assert "asymmetric_per_channel_conv_weights" in _codes("ort_qdq", _facts(zp_equal=False), _levels(), VNNI)


def test_qoperator_int8_only_on_x86():
    facts = _facts(kernels={"QLinearConv": 1})
    assert "qoperator_int8_activations_x86" in _codes("ort_qoperator", facts, _levels(u8=False), VNNI)
    assert "qoperator_int8_activations_x86" not in _codes("ort_qoperator", facts, _levels(u8=False), ARM)


def test_no_int8_kernels_is_reported():
    levels = {"all": OptimizedLevel(level="all", node_count=5, compute_ops_fp32=2, int8_coverage=0.0)}
    assert "no_int8_kernels" in _codes("pt2e_qdq", _facts(), levels, VNNI)
