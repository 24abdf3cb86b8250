"""Prometheus metrics of the job system, on a registry of our own (no process-global state
shared between test apps). The API's /metrics serves ``registry``.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily

_STAGE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)


class JobMetrics:
    def __init__(self, store=None, pool=None):
        self.registry = CollectorRegistry(auto_describe=True)
        self.submitted = Counter("quantcompare_jobs_submitted", "Jobs accepted", ["source"], registry=self.registry)
        self.cache_hits = Counter("quantcompare_cache_hits", "Submissions answered from a stored result",
                                  registry=self.registry)
        self.joined = Counter("quantcompare_submissions_joined", "Submissions that joined an identical queued or "
                              "running job", registry=self.registry)
        self.rejected = Counter("quantcompare_submissions_rejected", "Submissions refused for load",
                                ["reason"], registry=self.registry)
        self.finished = Counter("quantcompare_jobs_finished", "Jobs finished", ["status", "code"],
                                registry=self.registry)
        self.cancelled = Counter("quantcompare_jobs_cancelled", "Jobs deleted by DELETE, by the state they were in",
                                 ["state"], registry=self.registry)
        self.worker_deaths = Counter("quantcompare_worker_deaths", "Workers that died or were killed",
                                     ["reason"], registry=self.registry)
        self.stage_seconds = Histogram("quantcompare_stage_duration_seconds", "Seconds per pipeline stage",
                                       ["stage"], buckets=_STAGE_BUCKETS, registry=self.registry)
        self.job_seconds = Histogram("quantcompare_job_duration_seconds", "Seconds from start to finish per job",
                                     ["status"], buckets=_STAGE_BUCKETS, registry=self.registry)
        self._store = store
        self._pool = pool
        self.registry.register(_StateCollector(self))

    def bind(self, *, store=None, pool=None) -> None:
        self._store = store or self._store
        self._pool = pool or self._pool


class _StateCollector:
    """Jobs by state, queue length and workers by state, read at scrape time."""

    def __init__(self, metrics: JobMetrics):
        self.m = metrics

    def describe(self):
        return []

    def collect(self):
        if self.m._store is not None:
            counts = self.m._store.counts()
            jobs = GaugeMetricFamily("quantcompare_jobs", "Jobs in the index by state", labels=["state"])
            for state, n in counts.items():
                jobs.add_metric([state], n)
            yield jobs
            yield GaugeMetricFamily("quantcompare_queue_length", "Jobs waiting for a worker", value=counts["queued"])
        if self.m._pool is not None:
            workers = GaugeMetricFamily("quantcompare_workers", "Worker processes by state", labels=["state"])
            for state, n in self.m._pool.worker_states().items():
                workers.add_metric([state], n)
            yield workers
