"""Progress while a comparison runs: one updating line on a terminal, a live cell in a notebook.

IPython is used only when it is already imported and a kernel is running; the client never
depends on it.
"""

from __future__ import annotations

import html
import sys
import time
from typing import Any, Callable, Optional, TextIO, Union

from ._report import Job

ProgressArg = Union[None, bool, Callable[[Job], Any]]


class _Reporter:
    def update(self, job: Job) -> None:  # pragma: no cover - interface
        pass

    def close(self, job: Optional[Job]) -> None:
        pass


class _Silent(_Reporter):
    pass


class _Callback(_Reporter):
    def __init__(self, fn: Callable[[Job], Any]) -> None:
        self.fn = fn

    def update(self, job: Job) -> None:
        self.fn(job)


def _describe(job: Job, elapsed: float) -> str:
    text = f"quantcompare {job.id[:12]}: {job.status}"
    if job.status in ("queued", "running") and job.progress.stage:
        text += f" · {job.progress}"
    if job.cached:
        text += " · cached"
    return text + f" · {elapsed:.0f}s"


class _Terminal(_Reporter):
    """``\\r``-rewritten line on a TTY; on a pipe (CI logs) one line per change of stage."""

    def __init__(self, stream: TextIO, start: float) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.start = start
        self.last_key: Any = None
        self.drawn = False

    def update(self, job: Job) -> None:
        line = _describe(job, time.monotonic() - self.start)
        try:
            if self.tty:
                self.stream.write("\r\x1b[K" + line)
                self.drawn = True
            else:
                key = (job.status, job.progress.stage, job.progress.done)
                if key == self.last_key:
                    return
                self.last_key = key
                self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # a closed stream must not fail the comparison
            pass

    def close(self, job: Optional[Job]) -> None:
        try:
            if job is not None and job.done:
                line = _describe(job, time.monotonic() - self.start)
                self.stream.write(("\r\x1b[K" if self.tty else "") + line + "\n")
            elif self.drawn:
                self.stream.write("\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass


class _Notebook(_Reporter):
    def __init__(self, display: Any, html_cls: Any, start: float) -> None:
        self._display = display
        self._html = html_cls
        self.start = start
        self.handle: Any = None

    def _render(self, job: Job) -> Any:
        p = job.progress
        bar = ""
        if p.total:
            bar = f'<progress value="{int(p.done or 0)}" max="{int(p.total)}" style="width:12em"></progress> '
        text = html.escape(_describe(job, time.monotonic() - self.start))
        return self._html(f'<div class="quantcompare-progress">{bar}<code>{text}</code></div>')

    def update(self, job: Job) -> None:
        obj = self._render(job)
        if self.handle is None:
            self.handle = self._display(obj, display_id=True)
        else:
            self.handle.update(obj)

    def close(self, job: Optional[Job]) -> None:
        if job is not None:
            self.update(job)


def _notebook_display() -> Optional[tuple]:
    """``(display, HTML)`` when running inside a Jupyter kernel, else ``None``."""
    ipython = sys.modules.get("IPython")
    if ipython is None:
        return None
    try:
        shell = ipython.get_ipython()
        if shell is None or "IPKernelApp" not in getattr(shell, "config", {}):
            return None
        from IPython.display import HTML, display  # type: ignore[import-not-found]
    except Exception:
        return None
    return display, HTML


def reporter_from_arg(progress: ProgressArg, *, stream: Optional[TextIO] = None,
                      started: Optional[float] = None) -> _Reporter:
    """``None``: show progress only where someone watches (a notebook or a TTY on stderr);
    ``True``: always (a pipe gets one line per stage); ``False``: never; a callable gets each Job."""
    start = time.monotonic() if started is None else started
    if progress is False:
        return _Silent()
    if callable(progress) and progress is not True:
        return _Callback(progress)
    nb = _notebook_display()
    if nb is not None:
        return _Notebook(*nb, start)
    stream = stream if stream is not None else sys.stderr
    if progress is True or bool(getattr(stream, "isatty", lambda: False)()):
        return _Terminal(stream, start)
    return _Silent()
