"""The shapes an uploaded calibration ``.npz`` holds, read from the array headers only.

Dynamic dims the ``input_shapes`` option leaves open are taken from these shapes
(per-sample shape = ``array.shape[1:]``, see ``specs.resolved_input_shapes``), before any sample is
allocated: the header read is bounded, the data itself is read later by ``samples_from_npz``.
"""

from __future__ import annotations

import zipfile
from collections import Counter
from pathlib import Path

import numpy as np

from service.errors import InvalidCalibration

_MAX_HEADER = 1 << 16  # numpy's own headers are a few hundred bytes
_MAX_RANK = 32


def array_shapes_in_npz(path: Path) -> dict[str, tuple[int, ...]]:
    """``{key: shape}`` for every ``.npy`` member of the archive; refuses what numpy.savez does not write."""
    shapes: dict[str, tuple[int, ...]] = {}
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            twice = sorted(n for n, k in Counter(i.filename for i in infos).items() if k > 1)
            if twice:  # zipfile and numpy would read the last one, silently
                raise InvalidCalibration(f"the calibration archive holds two members named {twice[0]!r}",
                                         hint="write it with numpy.savez(path, **{input_name: array}): one array per input")
            for info in infos:
                if not info.filename.endswith(".npy"):
                    continue
                with zf.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    if version == (1, 0):
                        shape, _, _ = np.lib.format.read_array_header_1_0(f, max_header_size=_MAX_HEADER)
                    else:
                        shape, _, _ = np.lib.format.read_array_header_2_0(f, max_header_size=_MAX_HEADER)
                if len(shape) > _MAX_RANK:
                    raise ValueError("rank")
                shapes[info.filename[: -len(".npy")]] = tuple(int(d) for d in shape)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        raise InvalidCalibration(
            "the calibration file is not a readable .npz (numpy.savez) archive of plain arrays",
            hint="write it with numpy.savez(path, **{input_name: array}); object arrays are refused",
        ) from e
    return shapes
