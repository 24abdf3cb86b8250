"""Sparse initializers -> dense ones, before any path reads the upload.

ONNX Runtime densifies ``graph.sparse_initializer`` itself when it creates a session, so the fp32
file runs as uploaded, but nothing else here reads them: ORT's quantize_static found no
initializer for the weight ("Graph is not a DAG" in QDQ, "Invalid tensor name to quantize" in
QOperator) and the ONNX -> torch converter no value. Written dense, every path sees the same
weights ORT computes with. The dense size was already counted against the budgets at submit
(safety/onnx_checks.py ``_sparse``)."""
from __future__ import annotations

import numpy as np

from service.errors import InvalidModel


def dense_from_sparse(sp) -> np.ndarray:
    """The dense array of a SparseTensorProto: linear indices [NNZ], or coordinates [NNZ, rank]."""
    from onnx import numpy_helper

    shape = tuple(int(d) for d in sp.dims)
    values = numpy_helper.to_array(sp.values).reshape(-1)
    indices = numpy_helper.to_array(sp.indices).astype(np.int64)
    size = int(np.prod(shape))
    if indices.ndim == 2 and indices.shape == (values.size, len(shape)):
        if ((indices < 0) | (indices >= np.asarray(shape))).any():
            raise _bad(sp, "a coordinate outside its dims")
        indices = np.ravel_multi_index(tuple(indices.T), shape) if shape else np.zeros(values.size, np.int64)
    elif indices.ndim != 1 or indices.size != values.size:
        raise _bad(sp, f"indices of shape {list(indices.shape)} for {values.size} values")
    if ((indices < 0) | (indices >= size)).any():
        raise _bad(sp, "an index outside its dims")
    dense = np.zeros(size, values.dtype)
    dense[indices] = values
    return dense.reshape(shape)


def _bad(sp, what: str) -> InvalidModel:
    return InvalidModel(f"Sparse initializer '{sp.values.name[:200]}' has {what}.",
                        hint="Save the weight as a dense initializer (numpy_helper.from_array) and upload the model again.")


def densify_sparse_initializers(model) -> str | None:
    """Move every sparse initializer of the main graph into ``graph.initializer``, in place; the
    note to report, or None when there was none."""
    from onnx import numpy_helper

    graph = model.graph
    if not graph.sparse_initializer:
        return None
    dense = [numpy_helper.from_array(dense_from_sparse(sp), sp.values.name) for sp in graph.sparse_initializer]
    del graph.sparse_initializer[:]
    graph.initializer.extend(dense)
    names = ", ".join(repr(t.name) for t in dense[:5]) + (f" and {len(dense) - 5} more" if len(dense) > 5 else "")
    return (f"{len(dense)} sparse initializer(s) written dense ({names}), as ONNX Runtime densifies them at session "
            "creation: ORT's quantizer and the ONNX -> torch converter read dense initializers only")
