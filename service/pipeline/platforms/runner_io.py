"""What the host and its runner scripts exchange: the evaluation samples as one .npz, and the answer as
JSON. Both sides in one place, so that the format is written once.

Standard library and numpy only, imported at call time: the runner scripts (``emulated_ort.py`` under an
emulated interpreter, ``targets/openvino_run.py`` and ``targets/qnn_ort.py`` in their own environments)
import this file by path, beside no ``service`` package."""

import json
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


def answered(request: dict, answer: dict) -> int:
    """Write the answer where the request asks for it; a runner's exit code (0: the host reads the answer)."""
    Path(request["answer"]).write_text(json.dumps(answer))
    return 0
