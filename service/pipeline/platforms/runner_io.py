"""What the host and its runner scripts exchange: the evaluation samples as one .npz, and the answer as
JSON. Both sides in one place, so that the format is written once.

Standard library and numpy only, imported at call time: the runner scripts (``emulated_ort.py`` under an
emulated interpreter, ``targets/openvino_run.py`` and ``targets/qnn_ort.py`` in their own environments)
import this file by path, beside no ``service`` package."""

import json
import time
from pathlib import Path


def samples_npz(feeds: list[dict], path: Path) -> Path:
    """Write the feeds (one dict of input name -> array per sample) where a runner script reads them."""
    import numpy as np

    names = list(feeds[0]) if feeds else []
    arrays = {f"{i}/{n}": np.asarray(f[n]) for i, f in enumerate(feeds) for n in names}
    np.savez(path, __count__=np.int64(len(feeds)), __names__=np.array(names), **arrays)
    return path


def read_samples(request: dict) -> list[dict]:
    """The feeds ``samples_npz`` wrote, from the request's ``samples`` path (none when it has none)."""
    import numpy as np

    if not request.get("samples"):
        return []
    with np.load(request["samples"], allow_pickle=False) as z:
        names = [str(n) for n in z["__names__"]]
        return [{n: z[f"{i}/{n}"] for n in names} for i in range(int(z["__count__"]))]


def read_request(path: str) -> dict:
    return json.loads(Path(path).read_text())


def outputs_npz(runs: list[list], path: Path) -> str:
    """Write a file's outputs (one list of arrays per sample, in the session's output order) for the host."""
    import numpy as np

    np.savez(path, **{f"{i}/{k}": np.asarray(y) for i, run in enumerate(runs) for k, y in enumerate(run)})
    return str(path)


def read_outputs(path: str, count: int) -> list[list]:
    """The first ``count`` samples' outputs ``outputs_npz`` wrote, one list of arrays per sample."""
    import numpy as np

    with np.load(path, allow_pickle=False) as z:
        runs: dict[int, dict[int, np.ndarray]] = {}
        for key in z.files:
            i, k = (int(x) for x in key.split("/"))
            runs.setdefault(i, {})[k] = z[key]
    return [[runs[i][k] for k in sorted(runs[i])] for i in range(count)]


def timed(call, runs: int) -> dict:
    """One untimed run (first-run allocations are not the model's latency), then ``runs`` timed ones: their
    wall times as they came, for the host to summarise (runtime/latency.py ``latency_from_times``)."""
    call()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000.0)
    return {"times_ms": times, "runs": runs, "warmup": 1}


def failure(e: Exception, what: str = "") -> str:
    """An exception as the answer's ``error`` text: what failed, its type and message, bounded."""
    return f"{what}{type(e).__name__}: {e}"[:3000]


def each_artifact(request: dict, answer: dict, one) -> int:
    """``one(artifact, feeds)`` for each artifact of the request, on its samples, into ``answer``; then answer."""
    feeds = read_samples(request)
    for artifact in request["artifacts"]:
        answer["artifacts"][artifact["name"]] = one(artifact, feeds)
    return answered(request, answer)


def answered(request: dict, answer: dict) -> int:
    """Write the answer where the request asks for it; a runner's exit code (0: the host reads the answer)."""
    Path(request["answer"]).write_text(json.dumps(answer))
    return 0
