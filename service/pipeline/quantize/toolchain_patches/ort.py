"""ORT quantizer work done in less time, with the same result.

``MinMaxCalibrater.augment_graph`` (onnxruntime/quantization/calibrate.py, the calibrator of
``calibrate_method="minmax"``, the default here) adds ReduceMin -> Reshape and ReduceMax -> Reshape
after every tensor it calibrates. For each of them it rebuilds a dict of every value_info and
graph output and scans the node list for the tensor's first consumer to insert before:
tensors x (nodes + value infos + outputs), quadratic in the graph. Measured here: PP-OCRv4's
detector (672 nodes) 2.4 s, a 1493-node layout detector 10 s, a graph of 1000 outputs 17 of a
24 s job, so a graph of 5000 tensors took minutes before calibration ran once.

The replacement makes the same nodes, initializers and outputs in the same order, from one pass:

- a tensor's ReduceMin pair goes right before its first consumer in the original graph (nodes
  inserted earlier consume only their own tensor), and its ReduceMax pair right before that
  ReduceMin (it is now the tensor's first consumer): [ReduceMax, Reshape, ReduceMin, Reshape];
  a tensor no node reads gets the same four at the end, as ORT appends them;
- the type of a tensor is looked up as ORT's dict does (inputs over outputs over value infos,
  the outputs it has appended so far included).

``quantize_static`` itself (``QDQQuantizer`` and ``ONNXQuantizer``) scans the whole graph per tensor
it quantizes, in Python: ``ONNXModel.replace_input_of_all_nodes`` / ``replace_output_of_all_nodes``
visit every input of every node, ``find_by_name`` builds a list of every initializer with the name
before it takes the first, and ``BaseQuantizer.adjust_tensor_ranges`` rebuilds
``input_name_to_nodes()`` for every Relu and Clip. A chain of 1000 Conv+Relu took 25-32 s to quantize
in QDQ format (``docs/history/notes.md``, tenth pass). The same functions here:

- skip a node whose inputs (outputs) do not hold the name, by protobuf's own ``in`` (one C-level
  scan instead of a Python loop over the node's fields), then replace as ORT does;
- stop ``find_by_name`` at the first match (ORT's list comprehension has no side effects);
- build ``input_name_to_nodes()`` once for ``adjust_tensor_ranges``, whose loop changes only
  ``tensors_range``, never the graph, and ``try_replacing_upstream_output``'s reader count from
  the same ``in`` test.

Still a scan per tensor, so still quadratic, with a smaller constant; no index that a mutation
elsewhere in ORT could leave stale.

Tests compare the augmented models and the quantized files ORT writes with the shortcuts on and
off byte for byte (tests/pipeline/quantize/test_ort_toolchain_patches.py). Each replaced body is ORT 1.32's: with any
other ORT, or if ORT's names move, nothing is installed.
"""

from __future__ import annotations

import importlib
import uuid
from typing import Callable

from service.pipeline.quantize.toolchain_patches import replace_once

# The version whose function bodies the replacements below repeat.
_ORT_BODIES = "1.32."


def _ort_matches() -> bool:
    import onnxruntime

    return onnxruntime.__version__.startswith(_ORT_BODIES)


def _augment_graph(self) -> None:
    """``MinMaxCalibrater.augment_graph`` of onnxruntime 1.32 without its per-tensor scans."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = self.model
    graph = model.graph
    tensors, _ = self.select_tensors_to_calibrate(model)
    reshape_shape_name = str(uuid.uuid4())
    graph.initializer.append(numpy_helper.from_array(np.array([-1], dtype=np.int64), reshape_shape_name))

    first_reader: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for name in node.input:
            first_reader.setdefault(name, i)
    value_infos = {vi.name: vi for vi in graph.value_info}
    outputs = {o.name: o for o in graph.output}
    inputs = {i.name: i for i in graph.input}

    def type_of(name: str):
        for table in (inputs, outputs, value_infos):  # ORT's dict.update order: the last one wins
            if name in table:
                return table[name]
        raise ValueError(f"Unable to guess tensor type for tensor {name!r}, "
                         "running shape inference before quantization may resolve this issue.")

    def op_version(op_type: str) -> int:
        for opset_import in model.opset_import:
            if onnx.defs.has(op_type, opset_import.domain):
                return opset_import.version
        raise RuntimeError(f"Model does not contain a version for '{op_type}'.")

    before: dict[int, list] = {}
    new_outputs = []

    def reduce_pair(tensor_name: str, reduce_op_name: str) -> list:
        reduce_output = tensor_name + "_" + reduce_op_name
        intermediate_output = reduce_output + "_Reshape"
        reduce_node = helper.make_node(reduce_op_name, [tensor_name], [intermediate_output], keepdims=1,
                                       name=reduce_output)
        reshape_node = helper.make_node("Reshape", inputs=[intermediate_output, reshape_shape_name],
                                        outputs=[reduce_output], name=intermediate_output)
        vi = type_of(tensor_name)
        if self.per_channel:
            reduced_axes = [0, *range(2, len(vi.type.tensor_type.shape.dim))]
            if op_version(reduce_op_name) < 18:
                reduce_node.attribute.append(helper.make_attribute("axes", reduced_axes))
            else:
                reduce_axes_name = str(uuid.uuid4())
                reduce_node.input.append(reduce_axes_name)
                graph.initializer.append(numpy_helper.from_array(np.array(reduced_axes, dtype=np.int64),
                                                                 reduce_axes_name))
        out = helper.make_tensor_value_info(reduce_output, vi.type.tensor_type.elem_type, [None])
        new_outputs.append(out)
        outputs[out.name] = out
        return [reduce_node, reshape_node]

    for tensor in tensors:
        low = reduce_pair(tensor, "ReduceMin")
        high = reduce_pair(tensor, "ReduceMax")
        before.setdefault(first_reader.get(tensor, len(graph.node)), []).extend(high + low)

    nodes = []
    for i, node in enumerate(graph.node):
        nodes.extend(before.get(i, ()))
        nodes.append(node)
    nodes.extend(before.get(len(graph.node), ()))
    del graph.node[:]
    graph.node.extend(nodes)
    graph.output.extend(new_outputs)
    onnx.save(model, self.augmented_model_path, save_as_external_data=self.use_external_data_format)


def install_minmax_augment_shortcut() -> bool:
    """Replace ``MinMaxCalibrater.augment_graph`` once per process. True when it is in place."""
    if not _ort_matches():
        return False

    def locate():
        from onnxruntime.quantization.calibrate import MinMaxCalibrater

        return MinMaxCalibrater, "augment_graph"

    def replacement(original: Callable) -> Callable:
        return _augment_graph

    return replace_once("minmax augment shortcut", locate, replacement)


def _rename_in_all_nodes(nodes, field: str, old_name, new_name) -> None:
    """ORT's ``replace_node_input``/``replace_node_output`` over every node, skipping by protobuf's ``in``."""
    assert isinstance(old_name, str) and isinstance(new_name, str)
    for node in nodes:
        names = getattr(node, field)
        if old_name in names:
            for j in range(len(names)):
                if names[j] == old_name:
                    names[j] = new_name


def _replace_input_of_all_nodes(self, old_input_name, new_input_name):
    _rename_in_all_nodes(self.model.graph.node, "input", old_input_name, new_input_name)


def _replace_output_of_all_nodes(self, old_output_name, new_output_name):
    _rename_in_all_nodes(self.model.graph.node, "output", old_output_name, new_output_name)


def _find_by_name(item_name, item_list):
    for item in item_list:
        if item.name == item_name:
            return item
    return None


def _readers(model, name: str) -> int:
    """``len(model.input_name_to_nodes()[name])``: a node reading ``name`` twice counts twice; KeyError when none does."""
    count = 0
    for node in model.graph().node:
        if name in node.input:
            count += list(node.input).count(name)
    if not count:
        raise KeyError(name)
    return count


def _try_replacing_upstream_output(self, upstream_output_name, output_name):
    if (
        output_name in self.quantization_params
        and self.quantization_params[output_name].converted is None
        and self.quantization_params[upstream_output_name].converted is None
        and _readers(self.model, upstream_output_name) == 1
        and not self.model.is_graph_output(upstream_output_name)
        and not self.model.is_graph_input(upstream_output_name)
    ):
        self.model.replace_output_of_all_nodes(upstream_output_name, output_name)
        if upstream_output_name in self.tensors_to_quantize:
            del self.tensors_to_quantize[upstream_output_name]
        return True
    return False


def _adjust_tensor_ranges(self):
    import numpy as np
    from onnxruntime.quantization.calibrate import TensorData

    if self.tensors_range is None:
        return

    readers = self.model.input_name_to_nodes()  # the loop below changes tensors_range only
    for node in self.model.nodes():
        # adjust tensor_ranges for input of Clip and Relu node
        if node.op_type in ["Clip", "Relu"]:
            if not self.should_quantize_node(node):
                continue
            if len(readers[node.input[0]]) != 1:
                continue
            if node.input[0] not in self.tensors_range or node.output[0] not in self.tensors_range:
                continue
            td = self.tensors_range[node.output[0]]
            if not isinstance(td, TensorData):
                raise TypeError(f"Unexpected type {type(td)} for {node.output[0]!r}.")
            self.tensors_range[node.input[0]] = td
        # Adjust Softmax to range from 0.0 to 1.0
        elif node.op_type == "Softmax":
            if not self.should_quantize_node(node):
                continue
            self.tensors_range[node.output[0]] = TensorData(lowest=np.float32(0.0), highest=np.float32(1.0))


# (module, attribute holder, attribute, replacement): quantize_static's modules import find_by_name by name.
_QUANTIZER_SHORTCUTS = (
    ("onnx_model", "ONNXModel", "replace_input_of_all_nodes", _replace_input_of_all_nodes),
    ("onnx_model", "ONNXModel", "replace_output_of_all_nodes", _replace_output_of_all_nodes),
    ("qdq_quantizer", "QDQQuantizer", "try_replacing_upstream_output", _try_replacing_upstream_output),
    ("base_quantizer", "BaseQuantizer", "adjust_tensor_ranges", _adjust_tensor_ranges),
    ("quant_utils", None, "find_by_name", _find_by_name),
    ("onnx_model", None, "find_by_name", _find_by_name),
    ("qdq_quantizer", None, "find_by_name", _find_by_name),
    ("base_quantizer", None, "find_by_name", _find_by_name),
    ("onnx_quantizer", None, "find_by_name", _find_by_name),
    ("operators.conv", None, "find_by_name", _find_by_name),
    ("operators.matmul", None, "find_by_name", _find_by_name),
    ("operators.gemm", None, "find_by_name", _find_by_name),
)


def install_quantizer_shortcuts() -> bool:
    """Replace the quantizer's per-tensor scans above once per process. True when all are in place."""
    if not _ort_matches():
        return False
    installed = True
    for module, holder, attr, function in _QUANTIZER_SHORTCUTS:
        def locate(module=module, holder=holder, attr=attr):
            owner = importlib.import_module(f"onnxruntime.quantization.{module}")
            return (getattr(owner, holder) if holder else owner), attr

        installed &= replace_once(f"quantizer shortcut {module}.{holder or ''}.{attr}", locate,
                                  lambda original, function=function: function)
    return installed
