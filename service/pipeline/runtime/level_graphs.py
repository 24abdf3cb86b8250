"""The graph ORT runs at one level, written once, fingerprinted, and made again on demand.

ORT writes the optimized graph while a session is created (``optimized_model_filepath``). Here it
writes it as ``model.onnx`` plus its initializers in ``model.data`` (session config
``session.optimized_model_external_initializers_file_name``), in a folder of its own per
artifact and level. Fixed names make two levels' files byte-comparable (the graph names its data
file), and the graph alone parses in milliseconds.

A level graph is a function of (artifact file, level, ORT version, session options), up to two
things ORT does not keep the same from one session to the next: the order in which it writes
nodes that do not depend on each other, and the names it generates for some (x86's
NchwcTransformer writes ``ReorderOutput`` in one session and ``ReorderOutput_token_11`` in the next,
in a fresh process or the same one). The weights file is the same. So ``graph_sha256`` is taken
over the graph in canonical form: node names cleared, nodes, value_info and initializers sorted
(``canonical_graph_sha256``); every tensor name, op, attribute, input and output still counts. A
finished job need not keep the level graphs' weights: it records the two SHA-256s, and a download
creates the session again, checks both digests against the job's, and only then hands out the
file. What a user downloads is then provably the graph the job measured, node for node; only
those generated node names and the order of independent nodes may differ.

    python -m service.pipeline.runtime.level_graphs MODEL LEVEL THREADS GRAPH_SHA DATA_SHA OUT

regenerates one level graph into OUT (a self-contained .onnx, or a .zip of graph + data past
2 GB); it runs in a subprocess of the API so that ORT never loads into the API process.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from service.pipeline.files import file_sha256
from service.pipeline.ort.sessions import session_for
from service.pipeline.vocabulary import is_onnx_domain, subgraphs
from service.schemas.options import ComparisonOptions

GRAPH_FILE = "model.onnx"
DATA_FILE = "model.data"
# protobuf cannot serialize a message past 2 GiB: bigger graphs are served as graph + data in a zip.
SELF_CONTAINED_MAX_BYTES = 1_800_000_000


class LevelGraphMismatch(RuntimeError):
    """The graph made again differs from the one the job measured (another ORT, another machine)."""


@dataclass(frozen=True)
class LevelGraphFiles:
    folder: Path
    graph_sha256: str
    data_sha256: str | None  # None: ORT wrote no external initializers (a graph without weights >= 1 KiB)
    graph_bytes: int
    data_bytes: int

    @property
    def graph(self) -> Path:
        return self.folder / GRAPH_FILE

    @property
    def data(self) -> Path | None:
        return self.folder / DATA_FILE if self.data_sha256 is not None else None

    @property
    def digest(self) -> str:
        """Equal digests: ORT wrote the same graph (node for node) and the very same weights."""
        return level_graph_digest(self.graph_sha256, self.data_sha256)

    def drop_weights(self) -> None:
        if self.data is not None:
            self.data.unlink(missing_ok=True)



def level_graph_digest(graph_sha256: str, data_sha256: str | None) -> str:
    """``LevelGraphFiles.digest`` from the two SHA-256s a report keeps (``OptimizedLevel``)."""
    return f"{graph_sha256}:{data_sha256}"


def canonical_graph_sha256(graph_path: Path) -> str:
    """SHA-256 of the graph (its weights stay in their file) with node names cleared and nodes,
    value_info and initializers in sorted order: what ORT writes the same for a file and level."""
    import onnx

    model = onnx.load(str(graph_path), load_external_data=False)
    g = model.graph
    nodes = sorted((n for n in g.node), key=lambda n: (list(n.output), n.op_type, n.domain, list(n.input)))
    for n in nodes:
        n.name = ""
    g.ClearField("node")
    g.node.extend(nodes)
    for field, key in (("value_info", lambda v: v.name), ("initializer", lambda t: t.name)):
        items = sorted(getattr(g, field), key=key)
        g.ClearField(field)
        getattr(g, field).extend(items)
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()


def fingerprint(folder: Path) -> LevelGraphFiles:
    graph, data = folder / GRAPH_FILE, folder / DATA_FILE
    return LevelGraphFiles(folder=folder, graph_sha256=canonical_graph_sha256(graph),
                           data_sha256=file_sha256(data) if data.exists() else None,
                           graph_bytes=graph.stat().st_size, data_bytes=data.stat().st_size if data.exists() else 0)


def session_and_level_graph(model_path: Path, level: str, folder: Path, *, intra_op_threads: int,
                            session_config: dict[str, str] | None = None):
    """A session at ``level`` and the graph ORT wrote for it (``folder/model.onnx`` + ``model.data``);
    ``session_config``: the job's ORT session config entries (``options.ort_session``)."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    session = session_for(model_path, level, intra_op_threads=intra_op_threads, session_config=session_config,
                          optimized_model_path=folder / GRAPH_FILE, external_initializers_file=DATA_FILE)
    return session, fingerprint(folder)


def _varint_len(n: int) -> int:
    size = 1
    while n >= 0x80:
        n >>= 7
        size += 1
    return size


def _field_len(n: int) -> int:
    """A length-delimited protobuf field with a one-byte tag (field numbers below 16)."""
    return 1 + _varint_len(n) + n


def _shadowed(graph) -> set[str]:
    """Initializers of ``graph`` that a Constant node of the same graph also writes. ORT 1.32 saves a
    subgraph's Constant both ways when it writes initializers to an external file at disable_all
    (silero's If bodies: 117 names), and then refuses the file it wrote ("Graph must be in single
    static assignment form"); without the initializer the graph is the one ORT ran."""
    constants = {o for n in graph.node if n.op_type == "Constant" and is_onnx_domain(n.domain) for o in n.output}
    return {t.name for t in graph.initializer if t.name in constants}


def _embedded_len(graph, base_dir: Path) -> int:
    """``graph``'s serialized length once its external initializers are embedded and its shadowed
    ones dropped, its subgraphs' included (each nesting adds its own length prefixes)."""
    import onnx

    shadowed = _shadowed(graph)
    length = graph.ByteSize()
    for t in graph.initializer:
        if t.name in shadowed:
            length -= _field_len(t.ByteSize())
            continue
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        size = int(info["length"]) if "length" in info else (Path(base_dir) / info["location"]).stat().st_size
        embedded = onnx.TensorProto()
        embedded.CopyFrom(t)
        del embedded.external_data[:]
        embedded.data_location = onnx.TensorProto.DEFAULT
        embedded.raw_data = bytes(size)
        length += _field_len(embedded.ByteSize()) - _field_len(t.ByteSize())
        del embedded
    for node in graph.node:
        if not any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute):
            continue
        node_len = node.ByteSize()
        grown = node_len
        for a in node.attribute:
            bodies = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
            if not bodies:
                continue
            a_len = a.ByteSize()
            new_a = a_len + sum(_field_len(_embedded_len(b, base_dir)) - _field_len(b.ByteSize()) for b in bodies)
            grown += _field_len(new_a) - _field_len(a_len)
        length += _field_len(grown) - _field_len(node_len)
    return length


def self_contained_bytes(model, base_dir: Path) -> int:
    """The size of the file ``self_contained_from_level_graph`` writes, from the graph alone.

    ``model`` is loaded without its external data; each external initializer, in the main graph and
    in every subgraph, is sized as onnx embeds it (raw_data, external_data cleared, data_location
    DEFAULT), one tensor at a time.
    """
    return model.ByteSize() - _field_len(model.graph.ByteSize()) + _field_len(_embedded_len(model.graph, base_dir))


def _drop_shadowed(graph) -> None:
    shadowed = _shadowed(graph)
    if shadowed:
        kept = [t for t in graph.initializer if t.name not in shadowed]
        del graph.initializer[:]
        graph.initializer.extend(kept)
    for node in graph.node:
        for body in subgraphs(node):
            _drop_shadowed(body)


def self_contained_from_level_graph(files: LevelGraphFiles, out: Path) -> Path:
    """One file a user can open in Netron: the graph with its weights inside, or a zip past 2 GB."""
    import onnx

    if files.graph_bytes + files.data_bytes > SELF_CONTAINED_MAX_BYTES:
        out = out.with_suffix(".zip")
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as z:
            z.write(files.graph, GRAPH_FILE)
            if files.data is not None:
                z.write(files.data, DATA_FILE)
        return out
    model = onnx.load(str(files.graph), load_external_data=True)
    _drop_shadowed(model.graph)
    onnx.save(model, str(out))
    return out


def regenerate_level_graph(model_path: Path, level: str, *, intra_op_threads: int, graph_sha256: str,
                           data_sha256: str | None, work: Path, out: Path,
                           session_config: dict[str, str] | None = None) -> Path:
    """Create the session again (with the job's ``session_config``), check that ORT wrote the same graph and
    weights, write ``out``."""
    session, files = session_and_level_graph(model_path, level, work, intra_op_threads=intra_op_threads,
                                             session_config=session_config)
    del session
    if files.graph_sha256 != graph_sha256 or files.data_sha256 != data_sha256:
        raise LevelGraphMismatch(
            f"ORT wrote a different {level} graph now (graph {files.graph_sha256[:12]}, weights "
            f"{(files.data_sha256 or '-')[:12]}) than when the job ran ({graph_sha256[:12]}, {(data_sha256 or '-')[:12]})")
    try:
        return self_contained_from_level_graph(files, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = argv if argv is not None else sys.argv[1:]
    model, level, threads, graph_sha, data_sha, out = args[:6]
    # the job's options.ort_session as JSON (absent: none), validated again: only ORT_SESSION_ENTRIES reach ORT
    config = ComparisonOptions.model_validate({"ort_session": json.loads(args[6]) if len(args) > 6 else {}}).ort_session
    out_path = Path(out)
    try:
        made = regenerate_level_graph(Path(model), level, intra_op_threads=int(threads), graph_sha256=graph_sha,
                                      data_sha256=None if data_sha == "-" else data_sha,
                                      work=out_path.parent / (out_path.name + ".work"), out=out_path,
                                      session_config=config)
    except LevelGraphMismatch as e:
        print(json.dumps({"ok": False, "code": "level_graph_mismatch", "message": str(e)}))
        return 2
    print(json.dumps({"ok": True, "path": str(made)}))
    return 0


if __name__ == "__main__":  # pragma: no cover - exercised through the download route's subprocess
    raise SystemExit(main())


__all__ = ["GRAPH_FILE", "DATA_FILE", "LevelGraphFiles", "LevelGraphMismatch", "canonical_graph_sha256", "fingerprint",
           "session_and_level_graph", "self_contained_from_level_graph", "regenerate_level_graph"]
