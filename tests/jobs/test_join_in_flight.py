"""The store decides, in one transaction, whether a submission joins an identical job in flight (on SQLite
and on PostgreSQL: the ``store`` fixture of conftest.py)."""

from __future__ import annotations

import threading

import pytest

from service.jobs.spec import JobSpec
from service.jobs.store import JobStore
from service.jobs.submission import new_job_id


def _spec() -> JobSpec:
    return JobSpec(id=new_job_id(), model_file="input/model.onnx")


def _set_status(store: JobStore, job_id: str, status: str) -> None:
    store._tx(lambda c: c.execute("UPDATE jobs SET status=? WHERE id=?", (status, job_id)))


@pytest.mark.parametrize("first_status, joins", [("queued", True), ("running", True), ("succeeded", False),
                                                 ("failed", False)],
                         ids=["queued first is joined", "running first is joined",
                              "a finished success is not joined (the result cache answers it)",
                              "a failure is not joined (a new attempt runs)"])
def test_a_second_identical_submission_joins_only_a_job_in_flight(store, first_status, joins):
    first = _spec()
    assert store.create_or_join(first, cache_key="k", max_queue=10) == first.id
    _set_status(store, first.id, first_status)
    second = _spec()
    answer = store.create_or_join(second, cache_key="k", max_queue=10)
    assert (answer == first.id) is joins
    assert (store.get(second.id) is None) is joins  # joining inserts nothing


def test_joining_takes_no_queue_slot_and_a_new_key_still_sees_the_limit(store):
    first = _spec()
    assert store.create_or_join(first, cache_key="k", max_queue=1) == first.id
    assert store.create_or_join(_spec(), cache_key="k", max_queue=1) == first.id  # queue is full, joins anyway
    assert store.create_or_join(_spec(), cache_key="other", max_queue=1) is None  # a different job: no room
    assert store.create_or_join(_spec(), cache_key=None, max_queue=5) is not None  # no key: never joins


def test_a_concurrent_burst_of_one_submission_makes_one_job(store):
    answers: list[str] = []
    lock = threading.Lock()

    def go():
        a = store.create_or_join(_spec(), cache_key="burst", max_queue=100)
        with lock:
            answers.append(a)

    threads = [threading.Thread(target=go) for _ in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(answers)) == 1 and store.counts()["queued"] == 1
