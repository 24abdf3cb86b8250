"""ONNX uploads: parsed with external data off, checked statically, amplification refused before ORT."""

from __future__ import annotations

import os
import time

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from safety_models import conv_onnx, save, tiny_onnx
from tests import models
from service.errors import BudgetExceeded, InvalidModel, UnsupportedModel
from service.pipeline.inputs.safety import Budgets, check_input_elements, load_external_data_from_job_folder, onnx_model_from_path

F = TensorProto.FLOAT


def test_an_ordinary_model_passes_and_comes_back_as_a_model_proto(tmp_path):
    m = onnx_model_from_path(save(conv_onnx(), tmp_path / "m.onnx"))
    assert isinstance(m, onnx.ModelProto) and len(m.graph.node) == 2


def _const(name, arr):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(np.asarray(arr)))


def constant_of_shape_1gb():
    shape = numpy_helper.from_array(np.array([16384, 16384], np.int64), "shape")
    return tiny_onnx(nodes=[helper.make_node("ConstantOfShape", ["shape"], ["big"]),
                            helper.make_node("Add", ["x", "big"], ["y"])], initializers=[shape])


def constant_of_shape_behind_mul():
    # [2^31, 2^31] hides behind small factors and int64 wrap-around
    return tiny_onnx(nodes=[_const("a", np.array([65536, 4], np.int64)), _const("b", np.array([32768, 8], np.int64)),
                            helper.make_node("Mul", ["a", "b"], ["s"]),
                            helper.make_node("ConstantOfShape", ["s"], ["big"]),
                            helper.make_node("Add", ["x", "big"], ["y"])])


def sparse_initializer_1gb():
    values = numpy_helper.from_array(np.array([1.0], np.float32), "sp")
    indices = numpy_helper.from_array(np.array([0], np.int64), "sp_idx")
    sp = helper.make_sparse_tensor(values, indices, [16384, 16384])
    return tiny_onnx(nodes=[helper.make_node("Add", ["x", "sp"], ["y"])], sparse_initializer=[sp])


def chain(n):
    nodes = [helper.make_node("Relu", [f"v{i}" if i else "x"], [f"v{i + 1}" if i + 1 < n else "y"]) for i in range(n)]
    return tiny_onnx(nodes=nodes)


def expand_big():
    s = numpy_helper.from_array(np.array([4096, 4096, 4], np.int64), "s")
    return tiny_onnx(nodes=[helper.make_node("Expand", ["x", "s"], ["y"])], initializers=[s])


def tile_big():
    w = numpy_helper.from_array(np.ones((1, 4), np.float32), "w")
    r = numpy_helper.from_array(np.array([1 << 16, 1 << 10], np.int64), "r")
    return tiny_onnx(nodes=[helper.make_node("Tile", ["w", "r"], ["t"]), helper.make_node("Add", ["x", "t"], ["y"])],
                     initializers=[w, r])


def range_big():
    return tiny_onnx(nodes=[_const("a", np.array(0.0, np.float32)), _const("b", np.array(1e9, np.float32)),
                            _const("d", np.array(1.0, np.float32)), helper.make_node("Range", ["a", "b", "d"], ["r"]),
                            helper.make_node("Add", ["x", "r"], ["y"])])


def loop_forever():
    body = helper.make_graph([helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Identity", ["v"], ["v_out"])],
                             "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                                      helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
                                      helper.make_tensor_value_info("v", F, [1, 4])],
                             [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
                              helper.make_tensor_value_info("v_out", F, [1, 4])])
    return tiny_onnx(nodes=[_const("m", np.array(1 << 40, np.int64)), _const("c", np.array(True)),
                            helper.make_node("Loop", ["m", "c", "x"], ["y"], body=body)])


def nested_ifs(depth):
    def graph(d):
        if d == 0:
            return models.branch("Identity", ["x"], "o0", [1, 4])
        return models.branch("If", ["cond"], f"o{d}", [1, 4], then_branch=graph(d - 1), else_branch=graph(d - 1))
    g = graph(depth)
    return tiny_onnx(nodes=[_const("cond", np.array(True)), helper.make_node("If", ["cond"], ["y"], then_branch=g, else_branch=g)])


AMPLIFIERS = {
    "a 132-byte ConstantOfShape worth 1 GiB": (constant_of_shape_1gb, "max_constant_output_bytes"),
    "a ConstantOfShape whose shape hides behind a Mul": (constant_of_shape_behind_mul, "max_constant_output_bytes"),
    "a sparse initializer whose dense size is 1 GiB": (sparse_initializer_1gb, "max_tensor_bytes"),
    "a 100k-node chain": (lambda: chain(100_000), "max_nodes"),
    "an Expand to 256 MiB": (expand_big, "max_constant_output_bytes"),
    "a Tile of a constant to 1 GiB": (tile_big, "max_constant_output_bytes"),
    "a Range of 1e9 elements": (range_big, "max_constant_output_bytes"),
    "a Loop with 2^40 trips": (loop_forever, "max_loop_trip_count"),
    "If bodies nested 12 deep": (lambda: nested_ifs(12), "max_subgraph_depth"),
}


@pytest.mark.parametrize("build,budget", AMPLIFIERS.values(), ids=list(AMPLIFIERS))
def test_amplification_is_refused_statically_and_fast(tmp_path, build, budget):
    p = save(build(), tmp_path / "m.onnx")
    assert p.stat().st_size < 4_000_000
    t0 = time.perf_counter()
    with pytest.raises(BudgetExceeded) as e:
        onnx_model_from_path(p)
    assert time.perf_counter() - t0 < 5
    assert e.value.code == "budget_exceeded" and e.value.details["budget"] == budget
    assert budget in e.value.message  # the message names the setting to raise


def test_a_raised_budget_lets_a_bigger_model_through(tmp_path):
    p = save(chain(200), tmp_path / "m.onnx")
    with pytest.raises(BudgetExceeded):
        onnx_model_from_path(p, budgets=Budgets(max_nodes=100))
    onnx_model_from_path(p, budgets=Budgets(max_nodes=300))


def test_shared_external_ranges_are_counted_once_per_use(tmp_path):
    data = tmp_path / "w.bin"
    with open(data, "wb") as f:  # sparse 20 MiB file
        f.truncate(20 << 20)
    inits = []
    for i in range(64):
        t = TensorProto(name=f"w{i}", data_type=F, dims=[5 << 20])
        t.data_location = TensorProto.EXTERNAL
        for k, v in (("location", "w.bin"), ("offset", "0"), ("length", str(20 << 20))):
            t.external_data.add(key=k, value=v)
        inits.append(t)
    nodes = [helper.make_node("ReduceSum", [f"w{i}"], [f"s{i}"], keepdims=0) for i in range(64)]
    nodes.append(helper.make_node("Sum", ["x"] + [f"s{i}" for i in range(64)], ["y"]))
    p = save(tiny_onnx(nodes=nodes, initializers=inits), tmp_path / "m.onnx")
    assert p.stat().st_size < 10_000
    with pytest.raises(BudgetExceeded) as e:
        onnx_model_from_path(p, allowed_data_files={"w.bin"})
    assert e.value.details["budget"] == "max_initializer_bytes"


def _external_model(tmp_path, location, *, write_data=True):
    arr = np.arange(16, dtype=np.float32).reshape(1, 16)
    if write_data:
        (tmp_path / "w.bin").write_bytes(arr.tobytes())
    t = numpy_helper.from_array(arr, "w")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", location), ("offset", "0"), ("length", str(arr.nbytes))):
        t.external_data.add(key=k, value=v)
    return save(tiny_onnx(nodes=[helper.make_node("MatMul", ["x", "w"], ["y"])],
                          inputs=[helper.make_tensor_value_info("x", F, [1, 1])],
                          outputs=[helper.make_tensor_value_info("y", F, [1, 16])], initializers=[t]),
                tmp_path / "m.onnx")


def test_external_data_uploaded_next_to_the_model_is_accepted_and_loaded_by_path(tmp_path):
    p = _external_model(tmp_path, "w.bin")
    m = onnx_model_from_path(p, allowed_data_files={"w.bin"})
    load_external_data_from_job_folder(m, tmp_path, {"w.bin"})
    assert numpy_helper.to_array(m.graph.initializer[0]).sum() == 120


@pytest.mark.parametrize("location", ["../w.bin", "/etc/passwd", "sub/w.bin", "..", "C:\\w.bin", "w.bin\x00x"],
                         ids=["dot-dot", "absolute", "a sub folder", "the parent", "a windows path", "a NUL byte"])
def test_external_locations_outside_the_folder_are_refused(tmp_path, location):
    p = _external_model(tmp_path, location)
    with pytest.raises(InvalidModel, match="plain file name"):
        onnx_model_from_path(p, allowed_data_files={"w.bin", location})


def test_external_data_that_was_not_uploaded_is_refused(tmp_path):
    p = _external_model(tmp_path, "w.bin")
    with pytest.raises(InvalidModel, match="not among the files given with the model"):
        onnx_model_from_path(p)  # allowed_data_files=None: nothing was uploaded with it


def test_a_symlinked_data_file_is_refused(tmp_path):
    secret = tmp_path / "outside"
    secret.mkdir()
    (secret / "secret").write_bytes(b"\0" * 64)
    job = tmp_path / "job"
    job.mkdir()
    p = _external_model(job, "w.bin", write_data=False)
    os.symlink(secret / "secret", job / "w.bin")
    with pytest.raises(InvalidModel, match="link"):
        onnx_model_from_path(p, allowed_data_files={"w.bin"})


def test_a_hard_linked_data_file_is_refused(tmp_path):
    secret = tmp_path / "secret"
    secret.write_bytes(b"\0" * 64)
    job = tmp_path / "job"
    job.mkdir()
    p = _external_model(job, "w.bin", write_data=False)
    os.link(secret, job / "w.bin")
    with pytest.raises(InvalidModel, match="link"):
        onnx_model_from_path(p, allowed_data_files={"w.bin"})


def test_an_external_range_past_the_end_of_the_file_is_refused(tmp_path):
    p = _external_model(tmp_path, "w.bin")
    (tmp_path / "w.bin").write_bytes(b"\0" * 8)
    with pytest.raises(InvalidModel, match="past the end"):
        onnx_model_from_path(p, allowed_data_files={"w.bin"})


@pytest.mark.parametrize("offset, needle", [("abc", "not an integer"), ("-8", "negative")], ids=["not a number", "negative"])
def test_an_external_offset_that_is_no_position_is_refused_with_a_hint(tmp_path, offset, needle):
    """A non-integer offset came without a hint; a negative one was said to point 'past the end'."""
    p = _external_model(tmp_path, "w.bin")
    m = onnx.load(str(p), load_external_data=False)
    next(e for e in m.graph.initializer[0].external_data if e.key == "offset").value = offset
    save(m, p)
    with pytest.raises(InvalidModel, match=needle) as e:
        onnx_model_from_path(p, allowed_data_files={"w.bin"})
    assert e.value.hint


def _cycle():
    return tiny_onnx(nodes=[helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                            helper.make_node("Relu", ["a"], ["y"])])


STRUCTURE = {
    "a graph without nodes": (lambda: tiny_onnx(nodes=[], outputs=[helper.make_tensor_value_info("x", F, None)]),
                              InvalidModel, "no nodes"),
    "a cycle": (_cycle, InvalidModel, "cycle"),
    "an undefined input": (lambda: tiny_onnx(nodes=[helper.make_node("Add", ["x", "ghost"], ["y"])]), InvalidModel,
                           "defines"),
    "no graph inputs": (lambda: tiny_onnx(nodes=[_const("c", np.ones(2, np.float32)), helper.make_node("Relu", ["c"], ["y"])],
                                          inputs=[]), UnsupportedModel, "no graph inputs"),
    # it has one, but an initializer of the same name is its default: the message said "no graph inputs"
    "every input shadowed by an initializer": (
        lambda: tiny_onnx(initializers=[numpy_helper.from_array(np.ones((1, 4), np.float32), "x")]), UnsupportedModel,
        "input 'x' has an initializer of the same name"),
    "an unknown op": (lambda: tiny_onnx(nodes=[helper.make_node("Frobnicate", ["x"], ["y"])]), UnsupportedModel,
                      "Frobnicate"),
    "an unknown domain": (lambda: _with_domain("evil.corp"), UnsupportedModel, "operator domain 'evil.corp'"),
    "one domain at two versions": (lambda: _importing("", 13), InvalidModel, "versions 17 and 13"),
    "opset 99": (lambda: tiny_onnx(opset=99), UnsupportedModel, "opset 99"),
    "an initializer of a data type ONNX does not define": (lambda: _undefined_dtype(), InvalidModel, "data_type 99"),
    "an input with a zero dim": (lambda: tiny_onnx(inputs=[helper.make_tensor_value_info("x", F, [0, 4])],
                                                   outputs=[helper.make_tensor_value_info("y", F, [0, 4])]),
                                 UnsupportedModel, "dimension of size 0"),
    "opset 1": (lambda: tiny_onnx(opset=1), UnsupportedModel, "opset 1"),
    "IR version 99": (lambda: tiny_onnx(ir=99), UnsupportedModel, "IR version 99"),
    "raw data shorter than its dims": (lambda: _short_raw(), InvalidModel, "declares"),
    # shape=None on an input: ORT runs it, onnx's checker refuses it; the message names it. (An output
    # without a shape is given the inferred one: tests/pipeline/inputs/test_shapeless_outputs.py.)
    "an input without a shape": (lambda: tiny_onnx(inputs=[helper.make_tensor_value_info("x", F, None)]),
                                 InvalidModel, "(graph input/output 'x')"),
}


def _with_domain(dom):
    m = tiny_onnx(nodes=[helper.make_node("Evil", ["x"], ["y"], domain=dom)])
    m.opset_import.append(helper.make_opsetid(dom, 1))
    return m


def test_the_same_opset_import_twice_is_taken_as_onnx_and_ort_take_it(tmp_path):
    """skl2onnx 1.19 and onnx.compose.merge_models write it; refusing it refused real files."""
    import onnxruntime as ort

    path = save(_importing("", 17), tmp_path / "m.onnx")
    onnx.checker.check_model(str(path))
    ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    onnx_model_from_path(path)


def _importing(dom: str, version: int) -> onnx.ModelProto:
    m = tiny_onnx()  # no node in ``dom``: only the import
    m.opset_import.append(helper.make_opsetid(dom, version))
    return m


def _ort_loads(model) -> bool:
    import onnxruntime as ort

    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001
        assert "Current official support for domain" in str(e), e
        return False
    return True


@pytest.mark.parametrize("dom", sorted(__import__("service.pipeline.inputs.safety.onnx_checks",
                                                  fromlist=["x"]).ORT_NEWEST_OPSETS))
def test_a_domain_imported_past_what_ort_loads_is_refused_at_submit(dom, tmp_path):
    """The installed ORT is the oracle: at the listed version it loads a file that only imports the
    domain, one version later it refuses it (an unused ai.onnx.ml 99 import made every path fail)."""
    from service.pipeline.inputs.safety.onnx_checks import ORT_NEWEST_OPSETS

    newest = ORT_NEWEST_OPSETS[dom]
    assert _ort_loads(_importing(dom, newest))
    onnx_model_from_path(save(_importing(dom, newest), tmp_path / "ok.onnx"))
    assert not _ort_loads(_importing(dom, newest + 1))
    with pytest.raises(UnsupportedModel, match=f"domain '{dom}' at version {newest + 1}") as e:
        onnx_model_from_path(save(_importing(dom, newest + 1), tmp_path / "past.onnx"))
    assert "delete its opset_import entry" in e.value.hint


def test_a_domain_ort_does_not_register_is_taken_at_any_version(tmp_path):
    """Framework domains (paddle2onnx's, onnxruntime-extensions') are not checked by ORT either."""
    for dom in ("pkg.paddle2onnx", "ai.onnx.contrib"):
        assert _ort_loads(_importing(dom, 99))
        onnx_model_from_path(save(_importing(dom, 99), tmp_path / "m.onnx"))


LOCAL = "local.fn"


def _calling(fn_name: str, functions: list) -> onnx.ModelProto:
    """The graph is one call of ``fn_name``; ``functions`` are the model's local functions."""
    m = tiny_onnx(nodes=[helper.make_node(fn_name, ["x"], ["y"], domain=LOCAL)])
    m.opset_import.append(helper.make_opsetid(LOCAL, 1))
    m.functions.extend(functions)
    return m


def _function(name: str, nodes: list) -> onnx.FunctionProto:
    return helper.make_function(LOCAL, name, ["a"], ["b"], nodes, [helper.make_opsetid("", 17),
                                                                   helper.make_opsetid(LOCAL, 1)])


def _chain(callee: str, k: int, *, domain: str = LOCAL) -> list:
    names = ["a"] + [f"t{i}" for i in range(k - 1)] + ["b"]
    return [helper.make_node(callee, [names[i]], [names[i + 1]], domain=domain) for i in range(k)]


def _nested_calls(levels: int) -> onnx.ModelProto:
    """f0 is one Relu, f<k> calls f<k-1> ten times: 10**levels nodes once inlined, in a 2 KB file."""
    fns = [_function("f0", _chain("Relu", 1, domain=""))]
    fns += [_function(f"f{k}", _chain(f"f{k - 1}", 10)) for k in range(1, levels + 1)]
    return _calling(f"f{levels}", fns)


def _constant_of_shape_in_a_function():
    return _calling("amp", [_function("amp", [
        helper.make_node("Constant", [], ["s"], value_ints=[20000, 20000, 10]),
        helper.make_node("ConstantOfShape", ["s"], ["big"]),
        helper.make_node("ReduceMax", ["big"], ["r"], keepdims=0),
        helper.make_node("Add", ["a", "r"], ["b"])])])


def _loop_in_a_function():
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Relu", ["v_in"], ["v_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", F, [1, 4])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), helper.make_tensor_value_info("v_out", F, [1, 4])])
    return _calling("loop", [_function("loop", [
        helper.make_node("Constant", [], ["n"], value=numpy_helper.from_array(np.array(10**12, np.int64))),
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(np.array(True))),
        helper.make_node("Loop", ["n", "c", "a"], ["b"], body=body)])])


# Inside a local function: the same budgets as in the graph (each was bounded only by the job's timeout)
FUNCTION_BOMBS = {
    "calls nested to 10^5 inlined nodes": (lambda: _nested_calls(5), "max_nodes"),
    "a 14.9 GiB ConstantOfShape": (_constant_of_shape_in_a_function, "max_constant_output_bytes"),
    "a Loop of 10^12 trips": (_loop_in_a_function, "max_loop_trip_count"),
}


@pytest.mark.parametrize("build,budget", FUNCTION_BOMBS.values(), ids=list(FUNCTION_BOMBS))
def test_a_local_function_is_held_to_the_graph_s_budgets(tmp_path, build, budget):
    with pytest.raises(BudgetExceeded) as e:
        onnx_model_from_path(save(build(), tmp_path / "m.onnx"))
    assert budget in e.value.message


def test_calls_nested_past_what_the_check_recurses_through_are_refused_with_a_code(tmp_path):
    """2000 functions each calling the next once: within max_nodes, but counting what a call inlines
    to recursed past Python's limit (a RecursionError, an internal error to the user)."""
    fns = [_function("f0", _chain("Relu", 1, domain=""))]
    fns += [_function(f"f{k}", _chain(f"f{k - 1}", 1)) for k in range(1, 2000)]
    with pytest.raises(UnsupportedModel, match="call each other 65 deep"):
        onnx_model_from_path(save(_calling("f1999", fns), tmp_path / "m.onnx"))


def test_nested_calls_within_the_node_budget_are_taken(tmp_path):
    onnx_model_from_path(save(_nested_calls(3), tmp_path / "m.onnx"))  # 1000 nodes inlined


def _undefined_dtype():
    t = TensorProto(name="w", data_type=99, dims=[4], raw_data=b"\0" * 16)
    return tiny_onnx(nodes=[helper.make_node("Add", ["x", "w"], ["y"])], initializers=[t])


def _short_raw():
    t = TensorProto(name="w", data_type=F, dims=[1024, 1024], raw_data=b"\0" * 16)
    return tiny_onnx(nodes=[helper.make_node("Add", ["x", "w"], ["y"])], initializers=[t])


@pytest.mark.parametrize("build,error,needle", STRUCTURE.values(), ids=list(STRUCTURE))
def test_broken_or_unsupported_structure_is_refused(tmp_path, build, error, needle):
    with pytest.raises(error) as e:
        onnx_model_from_path(save(build(), tmp_path / "m.onnx"))
    assert needle in e.value.message and str(tmp_path) not in str(e.value)


def test_declared_input_too_large_is_refused(tmp_path):
    m = tiny_onnx(inputs=[helper.make_tensor_value_info("x", F, [1 << 14, 1 << 14])])
    with pytest.raises(BudgetExceeded, match="max_input_elements"):
        onnx_model_from_path(save(m, tmp_path / "m.onnx"))
    with pytest.raises(BudgetExceeded, match="max_input_elements"):
        check_input_elements("x", (1 << 14, 1 << 14))
    check_input_elements("x", (8, 3, 224, 224))


def _relu_fan_out(k: int) -> onnx.ModelProto:
    return tiny_onnx(nodes=[helper.make_node("Relu", ["x"], [f"y{i}"]) for i in range(k)],
                     outputs=[helper.make_tensor_value_info(f"y{i}", F, [1, 4]) for i in range(k)])


def test_graph_outputs_past_the_budget_are_refused_naming_it(tmp_path):
    """5000 outputs spent 158 s in ORT's quantizer (a list scan of the outputs per tensor)."""
    b = Budgets(max_graph_outputs=8)
    onnx_model_from_path(save(_relu_fan_out(8), tmp_path / "ok.onnx"), budgets=b)
    with pytest.raises(BudgetExceeded, match="graph outputs: 9 exceeds the budget max_graph_outputs = 8"):
        onnx_model_from_path(save(_relu_fan_out(9), tmp_path / "many.onnx"), budgets=b)


def _named(*names: str) -> onnx.ModelProto:
    """A Relu chain x -> y whose nodes carry ``names``."""
    outs = [f"t{i}" for i in range(len(names) - 1)] + ["y"]
    ins = ["x"] + outs[:-1]
    return tiny_onnx(nodes=[helper.make_node("Relu", [i], [o], name=n) for i, o, n in zip(ins, outs, names)])


def _subgraph_reusing_a_parent_name() -> onnx.ModelProto:
    body = models.branch("Relu", ["x"], "b", [1, 4], node="relu")
    other = models.branch("Neg", ["x"], "c", [1, 4], node="relu")
    cond = numpy_helper.from_array(np.array(True), "cond")
    return tiny_onnx(nodes=[helper.make_node("Relu", ["x"], ["r"], name="relu"),
                            helper.make_node("If", ["cond"], ["y"], then_branch=body, else_branch=other, name="if")],
                     initializers=[cond])


def _ort_refusal(model) -> str | None:
    import onnxruntime as ort

    try:
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001
        return str(e)
    return None


def test_nodes_sharing_a_name_are_refused_at_submit_as_ort_refuses_them(tmp_path):
    """onnx's checker takes two nodes named alike; ORT refuses the file at every level (graph.cc
    VerifyNoDuplicateName), so every path failed inside ORT with its words, the fp32 row included.
    The installed ORT is the oracle for all three cases: repeated names refused, empty names and a
    subgraph reusing its parent's names loaded."""
    repeated = _named("conv", "conv", "other")
    onnx.checker.check_model(repeated)
    assert "two nodes with same node name (conv)" in _ort_refusal(repeated)
    with pytest.raises(InvalidModel, match=r"'conv' \(2 nodes\)") as e:
        onnx_model_from_path(save(repeated, tmp_path / "dup.onnx"))
    assert "ONNX Runtime refuses" in e.value.message and "n.name" in e.value.hint

    for fine in (_named("", "", ""), _subgraph_reusing_a_parent_name()):
        assert _ort_refusal(fine) is None
        onnx_model_from_path(save(fine, tmp_path / "fine.onnx"))


def test_constant_nodes_sharing_a_name_are_not_refused_as_ort_loads_them(tmp_path):
    """ORT's Graph constructor turns Constant nodes into initializers and erases them before it adds
    nodes, so names they share are never checked (silero-vad 6.2.3's openvino_16k file: 15 Constants
    named 'F0::anon'); the refusal said ORT refuses a file it runs. A Constant sharing a Relu's name
    loads too; two Relus alike are still refused."""
    consts = [helper.make_node("Constant", [], [f"c{i}"], name="anon",
                               value=numpy_helper.from_array(np.full((1, 4), i, np.float32))) for i in range(2)]
    model = tiny_onnx(nodes=[*consts, helper.make_node("Add", ["x", "c0"], ["s"], name="anon"),
                             helper.make_node("Add", ["s", "c1"], ["y"], name="add")])
    assert _ort_refusal(model) is None
    onnx_model_from_path(save(model, tmp_path / "consts.onnx"))
    model.graph.node[3].name = "anon"
    assert "two nodes with same node name (anon)" in _ort_refusal(model)
    with pytest.raises(InvalidModel, match=r"'anon' \(2 nodes\)"):
        onnx_model_from_path(save(model, tmp_path / "dup.onnx"))


def test_the_renaming_the_hint_gives_makes_a_file_ort_loads(tmp_path):
    """The one-liner in the refusal's hint is what a user pastes: it must give unique names."""
    from service.pipeline.inputs.safety.onnx_checks import _refuse_repeated_node_names

    model = _named("a", "a", "a_1", "", "")
    with pytest.raises(InvalidModel) as e:
        _refuse_repeated_node_names(model.graph.node)
    snippet = e.value.hint.split("`")[1]
    exec(snippet, {"model": model})  # noqa: S102 - our own hint text
    assert _ort_refusal(model) is None
    onnx_model_from_path(save(model, tmp_path / "renamed.onnx"))


def _with_bytes(model: onnx.ModelProto, placeholder: bytes, raw: bytes, path) -> "Path":
    assert len(placeholder) == len(raw)  # the field's length prefix stays right
    path.write_bytes(model.SerializeToString().replace(placeholder, raw))
    return path


def test_text_that_is_not_utf8_is_refused_at_submit_naming_where_it_is(tmp_path):
    """protobuf's parser takes any bytes in a string field and python hands the field over as bytes:
    a node name b'NODE\\xff\\xfeNAME' went through all three quantizers and crashed the levels stage
    (internal_error). ORT loads the file, so only the submit check can say what is wrong."""
    import onnxruntime as ort

    named = _named("NODENAMEZZ", "r")
    bad = _with_bytes(named, b"NODENAMEZZ", b"NODE\xff\xfeNAME", tmp_path / "node.onnx")
    ort.InferenceSession(str(bad), providers=["CPUExecutionProvider"])  # ORT takes it
    with pytest.raises(InvalidModel) as e:
        onnx_model_from_path(bad)
    assert "not valid UTF-8 at model.graph.node[0].name" in e.value.message and "decode" in e.value.hint
    # anywhere a string field is: a metadata value, a node inside an If body
    meta = _named("a", "b")
    onnx.helper.set_model_props(meta, {"note": "METAVALUEZZ"})
    with pytest.raises(InvalidModel, match=r"model\.metadata_props\[0\]\.value"):
        onnx_model_from_path(_with_bytes(meta, b"METAVALUEZZ", b"META\xc3\x28VALUE", tmp_path / "meta.onnx"))
    nested = _subgraph_reusing_a_parent_name()
    nested.graph.node[1].attribute[0].g.node[0].name = "INNERNAMEZ"
    with pytest.raises(InvalidModel, match=r"model\.graph\.node\[1\]\.attribute\[0\]\.g\.node\[0\]\.name"):
        onnx_model_from_path(_with_bytes(nested, b"INNERNAMEZ", b"INNER\xe9NAME", tmp_path / "nested.onnx"))
    # valid UTF-8 beyond ASCII is text like any other
    onnx_model_from_path(_with_bytes(named, b"NODENAMEZZ", "NODE\u00e9\u4e2dZ".encode(), tmp_path / "fine.onnx"))
