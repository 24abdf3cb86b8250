"""The job store as several machines' workers see it: claim *this* job, atomically.

The local pool pulls the oldest queued job (``JobStore.claim_next``). With a broker, a worker is
handed a job id instead, possibly twice (the broker's delivery is at-least-once: a redelivery
after a lost worker, a republished message after a broker lost its data). ``claim`` turns that
into at-most-one run per attempt: it is the one place that decides whether a delivery runs.

    queued                          -> running (attempt + 1): run it
    running, inside its deadline    -> wait: another worker may still be running it
    running, past its deadline      -> its worker was lost: run it again (attempt + 1), or fail it
                                       as ``interrupted`` once it used ``max_attempts``
    succeeded | failed | no row     -> skip: a duplicate delivery, or the job was deleted

A running job's deadline is ``started_at + job_timeout_s + job_lost_after_s``: by the time limit
a live worker has killed and failed the job itself, so a job still ``running`` past the deadline
has no live worker. ``started_at`` is written by the claiming machine's clock: keep the
machines' clocks in step (NTP) to well within ``job_lost_after_s``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Callable

from service.jobs.store import JobRecord, JobStore, _record


@dataclass(frozen=True)
class Claim:
    action: str  # run | wait | skip | failed
    record: JobRecord | None = None
    wait_s: float = 0.0


class SharedJobStore(JobStore):
    def claim(self, job_id: str, *, job_timeout_s: float, lost_after_s: float, max_attempts: int,
              fail_problem: Callable[[JobRecord], dict], now: float | None = None) -> Claim:
        def tx(c):
            t = time.time() if now is None else now
            row = c.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
            if row is None:
                return Claim("skip")
            rec = _record(row)
            if rec.finished:
                return Claim("skip", rec)
            if rec.status == "running":
                deadline = (rec.started_at or 0.0) + job_timeout_s + lost_after_s
                if t < deadline:
                    return Claim("wait", rec, wait_s=deadline - t)
                if rec.attempts >= max_attempts:
                    c.execute("UPDATE jobs SET status='failed', error=?, finished_at=? WHERE id=?",
                              (json.dumps(fail_problem(rec)), t, job_id))
                    return Claim("failed", rec)
            c.execute("UPDATE jobs SET status='running', started_at=?, attempts=attempts+1, stage=NULL, done=0, "
                      "total=0 WHERE id=?", (t, job_id))
            return Claim("run", _record(c.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()))

        return self._tx(tx)

    def running_started_before(self, cutoff: float) -> list[str]:
        return [r[0] for r in self.db.query("SELECT id FROM jobs WHERE status='running' AND started_at < ?", (cutoff,))]

    def queued_before(self, cutoff: float) -> list[str]:
        rows = self.db.query("SELECT id FROM jobs WHERE status='queued' AND created_at < ? ORDER BY created_at, rowid",
                             (cutoff,))
        return [r[0] for r in rows]
