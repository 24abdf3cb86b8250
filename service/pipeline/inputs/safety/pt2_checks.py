"""A strict static check of a torch.export ``.pt2`` archive, then a defensive load.

Why: ``torch.export.load`` (torch 2.13) is code execution for a hostile archive by several
independent routes, all found on this stack:

* sample inputs are ``torch.load``-ed, falling back to ``weights_only=False`` when the safe load fails;
* weights/constants marked ``use_pickle`` are ``torch.load(weights_only=False)``-ed;
* ``custom_obj_*`` / ``opaque_obj_*`` constants go through ``torch._C._pickle_load_obj`` / ``pickle.loads``;
* symbolic shapes (``expr_str``) are ``sympy.sympify``-ed, which evaluates Python;
* ``guards_code`` strings are ``exec``-ed into a guard function when the program is unlifted (``ep.module()``): only shape
  arithmetic over the inputs' sizes is taken (two inputs sharing a Dim write one);
* ``data/aotinductor/`` payloads are dlopened, and their member names can escape the extraction folder;
* a graph node may target any ``torch.*`` attribute (``aten.from_file`` reads server files when calibration runs it);
* a zero-byte weight record with large declared sizes becomes ``torch.zeros(sizes)`` (64 GiB from 7 KB).

So the archive must match what ``torch.export.save`` writes for an ordinary inference model, member
by member, before torch sees it. The checker is framework-free (zipfile, json, pickletools); only
:func:`exported_program_from_pt2` imports torch, and only after the check passed.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import math
import os
import pickletools
import re
import stat
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from service.errors import UnsafeArchive, UnsupportedModel

from .budgets import DEFAULT_BUDGETS, Budgets

if TYPE_CHECKING:
    import torch

_HINT = (
    "Upload an archive written by torch.export.save(torch.export.export(model, args), path) for a plain inference "
    "model (no AOTInductor package, no extra files, no custom objects), or upload ONNX instead."
)
SCHEMA_MAJOR = 8  # torch 2.13's torch._export.serde.schema.SCHEMA_VERSION[0]

_ROOT_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_WEIGHT_RE = re.compile(r"^data/weights/weight_(\d{1,6})$")
_CONST_RE = re.compile(r"^data/constants/tensor_(\d{1,6})$")
# Fixed metadata members and their content grammar.
_FIXED_MEMBERS = {
    "archive_format": re.compile(rb"^pt2$"),
    "archive_version": re.compile(rb"^0$"),
    "byteorder": re.compile(rb"^(little|big)$"),
    ".data/version": re.compile(rb"^\d{1,3}\n?$"),
    ".data/serialization_id": re.compile(rb"^\d{1,64}$"),
    ".format_version": re.compile(rb"^\d{1,3}\n?$"),
    ".storage_alignment": re.compile(rb"^\d{1,6}\n?$"),
}
_JSON_MEMBERS = (
    "models/model.json",
    "data/weights/model_weights_config.json",
    "data/constants/model_constants_config.json",
)
_SAMPLE_INPUTS = "data/sample_inputs/model.pt"

# torch ScalarType enum of the serde schema -> bytes per element
_SERDE_DTYPE_SIZE = {
    0: None, 1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 2, 7: 4, 8: 8, 9: 4, 10: 8, 11: 16, 12: 1, 13: 2,
    14: 2, 15: 4, 16: 1, 17: 1, 18: 1, 19: 1, 20: 1, 21: 1, 22: 1, 23: 2, 24: 4, 25: 8, 26: 2, 27: 4, 28: 8,
}

# ---------------------------------------------------------------------------------------------
# graph ops allow-list: ordinary inference compute (aten), PT2E's quantize/dequantize, sym-int math.

_ATEN_OPS = frozenset("""
abs acos acosh adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d adaptive_max_pool1d adaptive_max_pool2d
add addmm addmv alias alias_copy all amax amin any arange argmax argmin as_strided as_strided_copy asin asinh atan
atan2 atanh avg_pool1d avg_pool2d avg_pool3d baddbmm batch_norm bitwise_and bitwise_not bitwise_or bitwise_xor bmm
bucketize cat ceil celu channel_shuffle chunk clamp clamp_max clamp_min clip clone constant_pad_nd contiguous conv1d
conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d convolution copy cos cosh cumprod cumsum detach
detach_ diag diagonal div dropout dropout_ einsum elu embedding empty empty_like empty_permuted eq erf erfc erfinv
exp exp2 expand expand_as expand_copy expm1 eye fill fill_ flatten flip floor floor_divide fmod frac full full_like
gather ge gelu glu group_norm gt hardshrink hardsigmoid hardsigmoid_ hardswish hardswish_ hardtanh hardtanh_ index
index_put index_select instance_norm isinf isnan layer_norm le leaky_relu leaky_relu_ lerp lift_fresh_copy linalg_vector_norm
linear linspace log log10 log1p log2 log_sigmoid log_softmax logical_and logical_not logical_or logical_xor
logsumexp lt masked_fill matmul max max_pool1d max_pool2d max_pool2d_with_indices max_pool3d maximum mean min
minimum mish mm mul multinomial narrow native_batch_norm native_dropout native_group_norm native_layer_norm ne neg
new_empty new_full new_ones new_zeros nonzero norm ones ones_like pad permute permute_copy pixel_shuffle pixel_unshuffle
pow prelu prod reciprocal reflection_pad1d reflection_pad2d relu relu6 relu_ remainder repeat repeat_interleave
replication_pad1d replication_pad2d reshape roll round rrelu rsqrt rsub scalar_tensor scaled_dot_product_attention
scatter scatter_add select select_copy selu sigmoid sigmoid_ sign silu silu_ sin sinh slice slice_copy softmax softplus
sort split split_with_sizes sqrt square squeeze squeeze_copy stack std sub sum t t_copy tan tanh tanh_ tensor_split
threshold to topk transpose transpose_copy tril triu true_divide trunc type_as unbind unflatten unsqueeze
unsqueeze_copy upsample_bicubic2d upsample_bilinear2d upsample_linear1d upsample_nearest1d upsample_nearest2d
upsample_nearest3d var var_mean view view_as view_copy where zeros zeros_like _native_batch_norm_legit
_native_batch_norm_legit_no_training _native_batch_norm_legit_functional _softmax _log_softmax _to_copy _unsafe_view
_adaptive_avg_pool2d _safe_softmax _assert_tensor_metadata _assert_scalar _assert_async sym_size sym_numel sym_stride
sym_storage_offset sym_constrain_range sym_constrain_range_for_size _functional_sym_constrain_range
_functional_sym_constrain_range_for_size item _local_scalar_dense
""".split())

_QUANT_OPS = frozenset("""
quantize_per_tensor dequantize_per_tensor quantize_per_channel dequantize_per_channel choose_qparams
quantize_per_token dequantize_per_token choose_qparams_per_token_asymmetric quantize_per_channel_group
dequantize_per_channel_group
""".split())

_PY_TARGETS = frozenset({
    "_operator.getitem", "_operator.add", "_operator.sub", "_operator.mul", "_operator.floordiv", "_operator.truediv",
    "_operator.mod", "_operator.neg", "_operator.pow", "_operator.eq", "_operator.ne", "_operator.lt", "_operator.le",
    "_operator.gt", "_operator.ge", "_operator.and_", "_operator.or_", "_operator.not_",
    "torch.sym_float", "torch.sym_int", "torch.sym_max", "torch.sym_min", "torch.sym_not", "torch.sym_ite",
    "math.ceil", "math.floor", "math.trunc", "math.sqrt",
})
_TARGET_RE = re.compile(r"^torch\.ops\.(aten|quantized_decomposed)\.([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)$")

# Argument kinds of the serde schema a plain inference graph uses. Refused: as_graph (higher-order
# ops and their subgraphs), as_custom_obj / as_operator / as_string_to_argument (code-carrying).
_ARG_KINDS = frozenset({
    "as_none", "as_tensor", "as_tensors", "as_int", "as_ints", "as_float", "as_floats", "as_string", "as_strings",
    "as_sym_int", "as_sym_ints", "as_scalar_type", "as_memory_format", "as_layout", "as_device", "as_bool",
    "as_bools", "as_sym_bool", "as_sym_bools", "as_optional_tensors", "as_optional_tensor", "as_sym_float",
    "as_sym_floats", "as_int_lists", "as_float_lists", "as_complex",
})
_NODE_META_KEYS = frozenset({"stack_trace", "nn_module_stack", "torch_fn", "source_fn_stack", "custom", "from_node"})
_TOP_KEYS = frozenset({"graph_module", "opset_version", "range_constraints", "schema_version", "verifiers",
                       "torch_version", "guards_code"})
_TREESPEC_TYPES = frozenset({None, "builtins.tuple", "builtins.list", "builtins.dict", "collections.OrderedDict",
                             "collections.defaultdict", "collections.namedtuple"})

# The narrow grammar of symbolic-shape expressions (sympy srepr of shape arithmetic).
_SYM_FUNCS = frozenset({
    "Symbol", "Integer", "Add", "Mul", "FloorDiv", "CeilDiv", "Mod", "PythonMod", "Max", "Min", "CleanDiv",
    "Rational", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "StrictLessThan", "LessThan", "StrictGreaterThan",
    "GreaterThan", "Equality", "Unequality", "And", "Or", "Not", "ModularIndexing", "FloorToInt", "CeilToInt",
    "TruncToInt", "IntTrueDiv", "FloatTrueDiv", "ToFloat", "Float", "Where",
})
_SYM_KWARGS = frozenset({"integer", "positive", "nonnegative", "negative", "nonpositive", "real", "finite", "zero",
                         "nonzero", "even", "odd", "precision"})
_SYM_TOKEN = re.compile(
    r"\s*(?:(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<num>-?\d{1,20}(?:\.\d{1,20})?(?:e-?\d{1,3})?)|(?P<str>'[a-z]{1,3}\d{1,6}')"
    r"|(?P<punct>[(),=]|-))"
)
_SYMBOL_NAME = re.compile(r"^[a-z]{1,3}\d{1,6}$")

# Pickle in sample inputs: what torch.save writes for a pytree of plain tensors.
_PICKLE_GLOBALS = frozenset(
    {("torch._utils", "_rebuild_tensor_v2"), ("collections", "OrderedDict"), ("torch", "Size"),
     ("torch._utils", "_rebuild_parameter")}
    | {("torch", f"{n}Storage") for n in ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char",
                                          "Byte", "Bool")}
)
_PICKLE_OPCODES = frozenset({
    "PROTO", "FRAME", "GLOBAL", "STACK_GLOBAL", "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET", "MEMOIZE", "PUT",
    "GET", "MARK", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "EMPTY_TUPLE", "EMPTY_LIST", "EMPTY_DICT", "LIST", "DICT",
    "APPEND", "APPENDS", "SETITEM", "SETITEMS", "BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "UNICODE",
    "BININT", "BININT1", "BININT2", "LONG1", "INT", "LONG", "BINFLOAT", "NEWTRUE", "NEWFALSE", "NONE",
    "REDUCE", "BINPERSID", "STOP", "SHORT_BINSTRING", "BINSTRING", "STRING",
})
_SAMPLE_INNER = re.compile(r"^(?:[A-Za-z0-9_.\-]{1,64}/)?(data\.pkl|\.format_version|\.storage_alignment|byteorder|version|"
                           r"\.data/version|\.data/serialization_id|data/\d{1,6})$")


@dataclass(frozen=True)
class Pt2Summary:
    root: str
    members: int
    uncompressed_bytes: int
    weights: int
    constants: int
    ops: frozenset[str]


def _refuse(msg: str, **details) -> UnsafeArchive:
    return UnsafeArchive(f"The .pt2 archive was refused: {msg}", hint=_HINT, **details)


# ---------------------------------------------------------------------------------------------
# public


def check_pt2_archive(path: Path, *, budgets: Budgets | None = None) -> Pt2Summary:
    """Statically check a .pt2 archive without importing torch; raise UnsafeArchive naming the first problem."""
    b = budgets or DEFAULT_BUDGETS
    path = Path(path)
    try:
        st = os.lstat(path)
    except OSError as e:
        raise _refuse("the file could not be read") from e
    if not stat.S_ISREG(st.st_mode):
        raise _refuse("it is not a regular file")
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            root = _check_zip_layout(path, zf, infos, st.st_size, b)
            rel = {i.filename[len(root) + 1:]: i for i in infos}
            return _check_members(zf, root, rel, b)
    except UnsafeArchive:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, NotImplementedError, ValueError,
            RuntimeError, struct.error, KeyError) as e:
        raise _refuse("it is not a well-formed zip archive") from e


def exported_program_from_pt2(path: Path, *, budgets: Budgets | None = None, allow_pt2: bool = True
                              ) -> "torch.export.ExportedProgram":
    """Check ``path`` statically, then load it with ``torch.export.load`` under weights-only unpickling.

    Call this inside a worker whose current directory is the (otherwise empty) job folder.
    """
    if not allow_pt2:
        raise UnsupportedModel("PyTorch .pt2 uploads are turned off on this server.",
                               hint="Upload the model as ONNX instead.", reason="pt2_disabled")
    b = budgets or DEFAULT_BUDGETS
    summary = check_pt2_archive(path, budgets=b)

    import torch

    # The loader falls back to weights_only=False when the safe load of sample inputs fails:
    # replay the safe load first, on the same bytes, and refuse if it fails.
    with zipfile.ZipFile(path) as zf:
        sample = zf.read(f"{summary.root}/{_SAMPLE_INPUTS}")
    with _forced_weights_only():
        try:
            torch.load(io.BytesIO(sample), weights_only=True, map_location="cpu")
        except Exception as e:
            raise _refuse("its sample inputs are not plain tensors (the weights-only load failed)") from e
        try:
            ep = torch.export.load(str(path))
        except Exception as e:
            raise UnsafeArchive(
                "The .pt2 archive passed the static check but torch.export.load could not read it.",
                hint="Save it again with torch.export.save from torch 2.13 and upload it again.",
            ) from e
    _check_loaded_program(ep)
    return ep


@contextlib.contextmanager
def _forced_weights_only():
    # Belt and braces: even a route this checker missed cannot unpickle arbitrary objects while
    # torch.export.load runs. (Closes the sample-input and use_pickle routes; the others are static.)
    old = os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD")
    os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("TORCH_FORCE_WEIGHTS_ONLY_LOAD", None)
        else:
            os.environ["TORCH_FORCE_WEIGHTS_ONLY_LOAD"] = old


def _check_loaded_program(ep) -> None:
    for node in ep.graph.nodes:
        if node.op == "call_function":
            name = _target_name(node.target)
            if not _target_allowed(name):
                raise _refuse(f"after loading, node '{node.name}' targets '{name}', which is not allowed")
        elif node.op not in ("placeholder", "output", "get_attr"):
            raise _refuse(f"after loading, node '{node.name}' is a '{node.op}' node")


def _target_name(t) -> str:
    if hasattr(t, "_schema") and hasattr(t, "_overloadname"):
        ns = t.namespace if hasattr(t, "namespace") else t._schema.name.split("::")[0]
        return f"torch.ops.{ns}.{t._schema.name.split('::')[-1]}.{t._overloadname}"
    mod = getattr(t, "__module__", "") or ""
    return f"{mod}.{getattr(t, '__name__', repr(t))}"


# ---------------------------------------------------------------------------------------------
# zip layout


def _check_zip_layout(path: Path, zf: zipfile.ZipFile, infos: list[zipfile.ZipInfo], file_size: int,
                      b: Budgets) -> str:
    if not infos:
        raise _refuse("it is empty")
    if len(infos) > b.max_archive_members:
        raise b.refuse("max_archive_members", ".pt2 archive members", len(infos))
    names = [i.filename for i in infos]
    if len(set(names)) != len(names):
        raise _refuse("it holds two members with the same name")
    root = names[0].split("/", 1)[0]
    if not _ROOT_RE.match(root) or root in (".", ".."):
        raise _refuse("its top-level folder name is not a plain name")
    total = 0
    for i in infos:
        n = i.filename
        if (n.startswith("/") or "\\" in n or "\x00" in n or n.endswith("/") or ":" in n
                or any(p in ("", ".", "..") for p in n.split("/"))):
            raise _refuse("a member name is absolute, contains '..', or is a folder entry")
        if not n.startswith(root + "/"):
            raise _refuse("its members do not all sit under one top-level folder")
        mode = i.external_attr >> 16
        if mode and (stat.S_ISLNK(mode) or not (stat.S_ISREG(mode) or stat.S_IFMT(mode) == 0)):
            raise _refuse("a member is a link or special file")
        if i.flag_bits & 0x1:
            raise _refuse("a member is encrypted")
        if i.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise _refuse("a member uses an unsupported compression method")
        if i.compress_type == zipfile.ZIP_STORED and i.compress_size != i.file_size:
            raise _refuse("a stored member's sizes disagree")
        if i.file_size > 1 << 20 and i.file_size > b.max_compression_ratio * max(i.compress_size, 1):
            raise b.refuse("max_compression_ratio", "compression ratio of a .pt2 member",
                           round(i.file_size / max(i.compress_size, 1), 1))
        total += i.file_size
    if total > b.max_archive_bytes:
        raise b.refuse("max_archive_bytes", ".pt2 archive uncompressed size", total, unit="bytes")
    _check_local_headers(path, infos, file_size, zf)
    return root


def _check_local_headers(path: Path, infos: list[zipfile.ZipInfo], file_size: int, zf: zipfile.ZipFile) -> None:
    """Members must tile the file from offset 0 to the central directory with no hidden bytes.

    Different zip readers (Python's zipfile here, miniz inside torch) must see the same members:
    no prepended data, no gaps where a second local header could hide, local and central names equal.
    """
    start_dir = getattr(zf, "start_dir", None)
    ordered = sorted(infos, key=lambda i: i.header_offset)
    expected = 0
    with open(path, "rb") as f:
        for i in ordered:
            if not (expected <= i.header_offset <= expected + 24) or (expected == 0 and i.header_offset != 0):
                raise _refuse("it has bytes outside its members (prepended data or gaps)")
            f.seek(i.header_offset)
            h = f.read(30)
            if len(h) != 30 or h[:4] != b"PK\x03\x04":
                raise _refuse("a member's local header is missing")
            name_len, extra_len = struct.unpack("<HH", h[26:30])
            name = f.read(name_len).decode("utf-8" if i.flag_bits & 0x800 else "cp437")
            if name != i.filename:
                raise _refuse("a member's local name differs from its central directory name")
            expected = i.header_offset + 30 + name_len + extra_len + i.compress_size
        if start_dir is not None and not (expected <= start_dir <= expected + 24):
            raise _refuse("it has bytes between its members and its central directory")
    if start_dir is None or file_size - start_dir > 1 << 20:
        raise _refuse("its central directory is malformed")


# ---------------------------------------------------------------------------------------------
# members


def _read(zf: zipfile.ZipFile, info: zipfile.ZipInfo, limit: int) -> bytes:
    if info.file_size > limit:
        raise _refuse(f"member '{_short(info.filename)}' is larger than allowed")
    with zf.open(info) as f:
        data = f.read(limit + 1)
    if len(data) != info.file_size or len(data) > limit:
        raise _refuse(f"member '{_short(info.filename)}' does not match its declared size")
    return data


def _check_members(zf: zipfile.ZipFile, root: str, rel: dict[str, zipfile.ZipInfo], b: Budgets) -> Pt2Summary:
    for name in rel:
        if name.startswith("data/aotinductor/") or name.endswith((".so", ".cpp", ".wrapper", ".dll", ".dylib")):
            raise _refuse("it carries an AOTInductor payload (compiled code), which is never loaded")
        if name.startswith("extra/"):
            raise _refuse("it carries extra files, which are not accepted")
        if "/custom_obj_" in name or "/opaque_obj_" in name:
            raise _refuse("it carries pickled custom objects, which are never loaded")
    for name in rel:
        if not (name in _FIXED_MEMBERS or name in _JSON_MEMBERS or name == _SAMPLE_INPUTS
                or _WEIGHT_RE.match(name) or _CONST_RE.match(name)):
            raise _refuse(f"it holds a member torch.export.save does not write: '{_short(name)}'")
    for name, pattern in _FIXED_MEMBERS.items():
        if name in rel and not pattern.match(_read(zf, rel[name], 128)):
            raise _refuse(f"member '{name}' has unexpected content")
    for required in ("archive_format", "archive_version", *_JSON_MEMBERS, _SAMPLE_INPUTS):
        if required not in rel:
            raise _refuse(f"it lacks '{required}' (only archives from torch.export.save for one model are accepted)")

    docs = {name: _load_json(_read(zf, rel[name], b.max_json_bytes), name) for name in _JSON_MEMBERS}
    weight_files = _check_payload_config(docs["data/weights/model_weights_config.json"], "data/weights/", _WEIGHT_RE,
                                         "weight_", rel, b)
    const_files = _check_payload_config(docs["data/constants/model_constants_config.json"], "data/constants/",
                                        _CONST_RE, "tensor_", rel, b)
    for name in rel:
        if (_WEIGHT_RE.match(name) and name not in weight_files) or (_CONST_RE.match(name) and name not in const_files):
            raise _refuse(f"member '{_short(name)}' is not referenced by any weight or constant")
    ops = _check_program(docs["models/model.json"], b)
    _check_sample_inputs(_read(zf, rel[_SAMPLE_INPUTS], 256 << 20), b)
    return Pt2Summary(root=root, members=len(rel), uncompressed_bytes=sum(i.file_size for i in rel.values()),
                      weights=len(weight_files), constants=len(const_files), ops=frozenset(ops))


def _load_json(data: bytes, name: str) -> Any:
    def no_dupes(pairs):
        d = {}
        for k, v in pairs:
            if k in d:
                raise _refuse(f"'{name}' repeats the key '{_short(k)}'")
            d[k] = v
        return d

    try:
        return json.loads(data.decode("utf-8"), object_pairs_hook=no_dupes)
    except UnsafeArchive:
        raise
    except (ValueError, RecursionError) as e:
        raise _refuse(f"'{name}' is not valid JSON") from e


def _check_payload_config(doc: Any, folder: str, pattern: re.Pattern, prefix: str,
                          rel: dict[str, zipfile.ZipInfo], b: Budgets) -> set[str]:
    if not isinstance(doc, dict) or set(doc) != {"config"} or not isinstance(doc["config"], dict):
        raise _refuse(f"the {folder} config is not a payload config")
    files: set[str] = set()
    total = 0
    for fqn, meta in doc["config"].items():
        if not isinstance(meta, dict) or not set(meta) <= {"path_name", "is_param", "use_pickle", "tensor_meta"}:
            raise _refuse(f"the entry for '{_short(fqn)}' in the {folder} config has unknown fields")
        if meta.get("use_pickle") is not False:
            raise _refuse(f"'{_short(fqn)}' is stored as a pickle (use_pickle), which is never loaded")
        pname = meta.get("path_name")
        if not isinstance(pname, str) or not pname.startswith(prefix):
            raise _refuse(f"'{_short(fqn)}' is not a plain tensor payload")
        member = folder + pname
        if not pattern.match(member) or member not in rel:
            raise _refuse(f"'{_short(fqn)}' points at a missing or misnamed member")
        tm = meta.get("tensor_meta")
        nbytes_needed = _tensor_meta_extent(tm, f"'{_short(fqn)}'", b)
        size = rel[member].file_size
        if nbytes_needed > 0 and size < nbytes_needed:
            raise _refuse(f"'{_short(fqn)}' declares more data than its record holds "
                          f"({nbytes_needed} > {size} bytes)")
        if member not in files:
            total += size
        files.add(member)
        total_needed = nbytes_needed
        if total_needed > b.max_tensor_bytes:
            raise b.refuse("max_tensor_bytes", f"weight '{_short(fqn)}'", total_needed, unit="bytes")
    if total > b.max_initializer_bytes:
        raise b.refuse("max_initializer_bytes", "weights and constants", total, unit="bytes")
    return files


def _tensor_meta_extent(tm: Any, what: str, b: Budgets, *, allow_symbolic: bool = False) -> int:
    """Bytes a tensor_meta needs from its storage; refuse anything but plain CPU strided tensors."""
    if not isinstance(tm, dict):
        raise _refuse(f"{what} has no tensor metadata")
    if not set(tm) <= {"dtype", "sizes", "requires_grad", "device", "strides", "storage_offset", "layout"}:
        raise _refuse(f"{what} has unknown tensor metadata fields")
    itemsize = _SERDE_DTYPE_SIZE.get(tm.get("dtype"))
    if itemsize is None:
        raise _refuse(f"{what} has an unsupported dtype")
    dev = tm.get("device")
    if not isinstance(dev, dict) or dev.get("type") != "cpu":
        raise _refuse(f"{what} is not a CPU tensor")
    if tm.get("layout") not in (7, None):  # 7 = torch.strided in the serde enum
        raise _refuse(f"{what} is not a strided (dense) tensor")
    sizes = [_sym_int_value(s, what, allow_symbolic, b) for s in tm.get("sizes", [])]
    strides = [_sym_int_value(s, what, allow_symbolic, b) for s in tm.get("strides", [])]
    offset = _sym_int_value(tm.get("storage_offset", {"as_int": 0}), what, allow_symbolic, b)
    if len(sizes) != len(strides) or len(sizes) > 16:
        raise _refuse(f"{what} has inconsistent sizes and strides")
    if any(s < 0 for s in sizes) or any(s < 0 for s in strides) or offset < 0:
        raise _refuse(f"{what} has negative sizes, strides or offset")
    numel = math.prod(sizes)
    if numel * itemsize > b.max_declared_tensor_bytes:
        raise b.refuse("max_declared_tensor_bytes", f"{what} declared size", numel * itemsize, unit="bytes")
    if numel == 0:
        return 0
    return (offset + sum((n - 1) * s for n, s in zip(sizes, strides)) + 1) * itemsize


def _sym_int_value(s: Any, what: str, allow_symbolic: bool, b: Budgets) -> int:
    if isinstance(s, dict) and set(s) == {"as_int"} and isinstance(s["as_int"], int) and not isinstance(s["as_int"], bool):
        return s["as_int"]
    if allow_symbolic and isinstance(s, dict) and set(s) == {"as_expr"}:
        e = s["as_expr"]
        if not isinstance(e, dict) or not set(e) <= {"expr_str", "hint"}:
            raise _refuse(f"{what} has a malformed symbolic size")
        _check_sym_expr(e.get("expr_str"), b)
        hint = e.get("hint")
        if isinstance(hint, dict) and isinstance(hint.get("as_int"), int):
            return max(hint["as_int"], 0)
        return 1
    raise _refuse(f"{what} has a size that is not a plain integer")


def _check_sym_expr(expr: Any, b: Budgets) -> None:
    """Only the srepr of shape arithmetic: known sympy function names, symbol names like 's77', small ints."""
    if not isinstance(expr, str) or not expr or len(expr) > b.max_symbolic_expr_chars:
        raise b.refuse("max_symbolic_expr_chars", "a symbolic shape expression", len(expr) if isinstance(expr, str) else 0) \
            if isinstance(expr, str) and expr else _refuse("a symbolic shape expression is empty or not a string")
    pos, depth, prev = 0, 0, None
    while pos < len(expr):
        m = _SYM_TOKEN.match(expr, pos)
        if not m or m.end() == pos:
            raise _refuse("a symbolic shape expression has characters outside the allowed grammar")
        pos = m.end()
        if m.group("name"):
            name = m.group("name")
            nxt = expr[pos:pos + 1]
            if name in ("True", "False"):
                if prev != "=":
                    raise _refuse("a symbolic shape expression uses a bare boolean")
            elif nxt == "(":
                if name not in _SYM_FUNCS:
                    raise _refuse(f"a symbolic shape expression calls '{_short(name)}', which is not allowed")
            elif nxt == "=":
                if name not in _SYM_KWARGS:
                    raise _refuse(f"a symbolic shape expression uses the keyword '{_short(name)}'")
            elif not _SYMBOL_NAME.match(name) and name not in ("oo", "zoo", "nan", "int_oo"):
                raise _refuse(f"a symbolic shape expression names '{_short(name)}', which is not a shape symbol")
            prev = "name"
        elif m.group("punct"):
            p = m.group("punct")
            if p == "(":
                depth += 1
                if depth > 32:
                    raise _refuse("a symbolic shape expression is nested too deeply")
            elif p == ")":
                depth -= 1
                if depth < 0:
                    raise _refuse("a symbolic shape expression has unbalanced parentheses")
            prev = p
        else:
            prev = "lit"
    if depth != 0:
        raise _refuse("a symbolic shape expression has unbalanced parentheses")


def _target_allowed(target: str) -> bool:
    if target in _PY_TARGETS:
        return True
    m = _TARGET_RE.match(target)
    if not m:
        return False
    ns, op, _overload = m.groups()
    return op in (_ATEN_OPS if ns == "aten" else _QUANT_OPS)


# guards_code: torch.export writes one Python expression per shape guard (two inputs sharing a
# Dim: "L['x'].size()[0] == L['y'].size()[0]"), and ep.module() exec()s them into a guard
# function. Only shape arithmetic over the inputs' sizes is taken: L['<input>'] subscripts,
# .size() / .stride() calls, integers, + - * // %, comparisons, and / or / not.
_GUARD_CHARS = re.compile(r"[A-Za-z0-9_\[\]()'.=!<>+\-*/% ]+")
_GUARD_OPS = ("And", "Or", "Not", "USub", "Add", "Sub", "Mult", "FloorDiv", "Mod", "Eq", "NotEq", "Lt", "LtE", "Gt",
              "GtE")
_MAX_GUARDS = 1024


def _check_guards_code(guards: Any, b: Budgets) -> None:
    if not guards:
        return
    if not isinstance(guards, list) or len(guards) > _MAX_GUARDS:
        raise _refuse("its guards_code is not a list of shape guards")
    for code in guards:
        if not isinstance(code, str) or len(code) > b.max_symbolic_expr_chars:
            raise b.refuse("max_symbolic_expr_chars", "a shape guard", len(code) if isinstance(code, str) else 0)
        try:
            ok = bool(_GUARD_CHARS.fullmatch(code)) and _is_shape_guard(ast.parse(code, mode="eval").body)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            ok = False
        if not ok:  # exec()-ed into a guard function when the program is unlifted (ep.module())
            raise _refuse("it carries guards_code that is not shape arithmetic (Python source that torch would "
                          "execute)")


def _is_shape_guard(node) -> bool:
    """expr := int | size | expr (+ - * // %) expr | expr (== != < <= > >=) expr | and / or / not / -expr;
    size := <input>.size()[int] | <input>.stride()[int]; input := L['name'] | input[int] | input['name']."""
    ops_ok = all(type(op).__name__ in _GUARD_OPS for op in getattr(node, "ops", [getattr(node, "op", None)])
                 if op is not None)
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, ast.BinOp):
        return ops_ok and _is_shape_guard(node.left) and _is_shape_guard(node.right)
    if isinstance(node, ast.UnaryOp):
        return ops_ok and _is_shape_guard(node.operand)
    if isinstance(node, ast.BoolOp):
        return ops_ok and all(_is_shape_guard(v) for v in node.values)
    if isinstance(node, ast.Compare):
        return ops_ok and all(_is_shape_guard(v) for v in (node.left, *node.comparators))
    if isinstance(node, ast.Subscript):  # size: the call's result indexed by an int
        call = node.value
        return (isinstance(node.slice, ast.Constant) and type(node.slice.value) is int and isinstance(call, ast.Call)
                and not call.args and not call.keywords and isinstance(call.func, ast.Attribute)
                and call.func.attr in ("size", "stride") and _is_guard_input(call.func.value))
    return False


def _is_guard_input(node) -> bool:
    if not isinstance(node, ast.Subscript) or not isinstance(node.slice, ast.Constant):
        return False
    key = node.slice.value
    if isinstance(node.value, ast.Name):
        return node.value.id == "L" and type(key) is str and key.isidentifier() and not key.startswith("__")
    return (type(key) is int or (type(key) is str and key.isidentifier())) and _is_guard_input(node.value)


def _check_program(doc: Any, b: Budgets) -> set[str]:
    if not isinstance(doc, dict) or not set(doc) <= _TOP_KEYS or "graph_module" not in doc:
        raise _refuse("models/model.json is not an exported program")
    sv = doc.get("schema_version")
    if not isinstance(sv, dict) or sv.get("major") != SCHEMA_MAJOR:
        raise _refuse("it was written by a torch.export schema this server cannot read",
                      ) if not isinstance(sv, dict) else UnsupportedModel(
            f"The .pt2 archive uses torch.export schema {sv.get('major')}.x; this server reads {SCHEMA_MAJOR}.x "
            "(torch 2.13).", hint="Save the archive with torch 2.13, or upload ONNX.")
    _check_guards_code(doc.get("guards_code"), b)
    if not isinstance(doc.get("opset_version", {}), dict) or not set(doc.get("opset_version", {})) <= {"aten"}:
        raise _refuse("it declares operator sets other than aten")
    for sym, rng in (doc.get("range_constraints") or {}).items():
        if not _SYMBOL_NAME.match(str(sym)) or not isinstance(rng, dict) or not set(rng) <= {"min_val", "max_val"}:
            raise _refuse("its range constraints are malformed")
        for v in rng.values():
            if v is not None and not isinstance(v, int):
                raise _refuse("its range constraints are malformed")

    gm = doc["graph_module"]
    if not isinstance(gm, dict) or not set(gm) <= {"graph", "signature", "module_call_graph", "metadata",
                                                   "treespec_namedtuple_fields"}:
        raise _refuse("its graph module has unknown fields")
    if gm.get("metadata"):
        raise _refuse("its graph module carries metadata")
    if gm.get("treespec_namedtuple_fields"):
        raise _refuse("its inputs or outputs use named tuples")
    g = gm.get("graph")
    if not isinstance(g, dict):
        raise _refuse("it has no graph")
    if g.get("custom_obj_values"):
        raise _refuse("its graph uses custom objects")
    nodes = g.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise _refuse("its graph has no nodes")
    if len(nodes) > b.max_nodes:
        raise b.refuse("max_nodes", ".pt2 graph nodes", len(nodes))

    ops: set[str] = set()
    for node in nodes:
        if not isinstance(node, dict):
            raise _refuse("a graph node is malformed")
        target = node.get("target")
        if not isinstance(target, str) or not _target_allowed(target):
            raise _refuse(f"a graph node targets '{_short(str(target))}', which is not on the allow-list of "
                          "aten / quantized_decomposed operators", target=_short(str(target)))
        ops.add(target)
        for inp in node.get("inputs", []):
            if not isinstance(inp, dict) or not isinstance(inp.get("arg"), dict):
                raise _refuse("a graph node input is malformed")
            _check_argument(inp["arg"], b)
        for out in node.get("outputs", []):
            _check_argument(out, b)
        meta = node.get("metadata") or {}
        if not isinstance(meta, dict) or not set(meta) <= _NODE_META_KEYS:
            raise _refuse("a graph node carries unknown metadata")
        for v in meta.values():
            if not isinstance(v, str) or len(v) > 1 << 20:
                raise _refuse("a graph node carries malformed metadata")
        if "source_fn_stack" in meta:
            for item in meta["source_fn_stack"].split(";"):
                parts = item.split(",")
                if len(parts) != 2 or not re.fullmatch(r"[A-Za-z_][\w.]{0,200}", parts[1]):
                    raise _refuse("a graph node's source_fn_stack is malformed")
        if "custom" in meta or "from_node" in meta:
            for k in ("custom", "from_node"):
                if k in meta:
                    _load_json(meta[k].encode(), f"node metadata '{k}'")

    for name, tm in (g.get("tensor_values") or {}).items():
        _tensor_meta_extent(tm, f"tensor '{_short(name)}'", b, allow_symbolic=True)
    for key in ("sym_int_values", "sym_bool_values", "sym_float_values"):
        vals = g.get(key) or {}
        if not isinstance(vals, dict):
            raise _refuse(f"its {key} are malformed")
        for v in vals.values():
            _check_sym_value(v, b)
    for mc in gm.get("module_call_graph") or []:
        sig = (mc or {}).get("signature")
        if sig:
            for k in ("in_spec", "out_spec"):
                _check_treespec(sig.get(k))
    return ops


def _check_sym_value(v: Any, b: Budgets) -> None:
    if not isinstance(v, dict) or len(v) != 1:
        raise _refuse("a symbolic value is malformed")
    (kind, payload), = v.items()
    if kind in ("as_int", "as_bool", "as_float"):
        return
    if kind == "as_expr" and isinstance(payload, dict):
        _check_sym_expr(payload.get("expr_str"), b)
        return
    raise _refuse("a symbolic value is malformed")


def _check_argument(arg: Any, b: Budgets) -> None:
    if not isinstance(arg, dict) or len(arg) != 1:
        raise _refuse("a graph argument is malformed")
    (kind, payload), = arg.items()
    if kind not in _ARG_KINDS:
        raise _refuse(f"a graph argument of kind '{_short(kind)}' is not allowed (subgraphs, custom objects and "
                      "operators as arguments are refused)")
    if kind == "as_device":
        if not isinstance(payload, dict) or payload.get("type") != "cpu":
            raise _refuse("a graph argument names a device other than cpu")
    elif kind in ("as_string", "as_strings"):
        items = payload if isinstance(payload, list) else [payload]
        if any(not isinstance(s, str) or len(s) > 256 for s in items):
            raise _refuse("a graph string argument is malformed or too long")
    elif kind in ("as_sym_int", "as_sym_bool", "as_sym_float", "as_sym_ints", "as_sym_bools", "as_sym_floats"):
        items = payload if isinstance(payload, list) else [payload]
        for it in items:
            if isinstance(it, dict) and "as_expr" in it:
                _check_sym_value(it, b)


def _check_treespec(spec: Any) -> None:
    if spec is None:
        return
    try:
        doc = json.loads(spec) if isinstance(spec, str) else None
    except ValueError as e:
        raise _refuse("an input/output tree spec is not JSON") from e
    if not isinstance(doc, list) or len(doc) != 2:
        raise _refuse("an input/output tree spec is malformed")

    def walk(node, depth=0):
        if depth > 64 or not isinstance(node, dict):
            raise _refuse("an input/output tree spec is malformed")
        if node.get("type") not in _TREESPEC_TYPES:
            raise _refuse(f"an input/output tree spec uses the type '{_short(str(node.get('type')))}'")
        for c in node.get("children_spec") or []:
            walk(c, depth + 1)

    walk(doc[1])


def _check_sample_inputs(data: bytes, b: Budgets) -> None:
    """torch.save output (a zip holding data.pkl + raw storages) of a pytree of plain tensors."""
    try:
        inner = zipfile.ZipFile(io.BytesIO(data))
        infos = inner.infolist()
    except (zipfile.BadZipFile, ValueError, EOFError) as e:
        raise _refuse("its sample inputs are not a torch.save archive") from e
    if len(infos) > 1024 or len({i.filename for i in infos}) != len(infos):
        raise _refuse("its sample inputs hold too many or duplicate members")
    pkl = None
    for i in infos:
        if not _SAMPLE_INNER.match(i.filename) or i.flag_bits & 1:
            raise _refuse("its sample inputs hold an unexpected member")
        if i.file_size > 1 << 20 and i.file_size > b.max_compression_ratio * max(i.compress_size, 1):
            raise b.refuse("max_compression_ratio", "compression ratio of the sample inputs", 
                           round(i.file_size / max(i.compress_size, 1), 1))
        if i.filename.endswith("data.pkl"):
            if pkl is not None:
                raise _refuse("its sample inputs hold two pickles")
            pkl = inner.read(i) if i.file_size <= 8 << 20 else None
            if pkl is None:
                raise _refuse("its sample inputs' pickle is too large")
    if pkl is None:
        raise _refuse("its sample inputs hold no data.pkl")
    _check_pickle(pkl)


def _check_pickle(data: bytes) -> None:
    """Opcode-level allow-list: tensors, containers, numbers and strings; only known globals."""
    strings: list[str] = []
    try:
        for op, arg, _pos in pickletools.genops(data):
            name = op.name
            if name not in _PICKLE_OPCODES:
                raise _refuse(f"its sample inputs' pickle uses the opcode {name}, which is not allowed")
            if name in ("SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "SHORT_BINSTRING", "BINSTRING",
                        "STRING"):
                strings.append(arg if isinstance(arg, str) else repr(arg))
            elif name == "GLOBAL":
                mod, _, attr = str(arg).partition(" ")
                if (mod, attr) not in _PICKLE_GLOBALS:
                    raise _refuse(f"its sample inputs' pickle imports '{_short(mod)}.{_short(attr)}'")
            elif name == "STACK_GLOBAL":
                if len(strings) < 2 or (strings[-2], strings[-1]) not in _PICKLE_GLOBALS:
                    raise _refuse("its sample inputs' pickle imports a global that is not allowed")
    except UnsafeArchive:
        raise
    except Exception as e:
        raise _refuse("its sample inputs' pickle is malformed") from e


def _short(s: str, limit: int = 80) -> str:
    s = "".join(ch if ch.isprintable() else "?" for ch in str(s))
    return s if len(s) <= limit else s[: limit - 3] + "..."


__all__ = ["Pt2Summary", "check_pt2_archive", "exported_program_from_pt2"]
