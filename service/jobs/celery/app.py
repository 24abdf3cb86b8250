"""The Celery application both sides build from the same ``Settings``: the API publishes, the
workers (``quantcompare worker``) consume. Light on purpose: no torch, no store, no FastAPI.

The message carries only the job id. Everything else (the spec, the inputs, the state) is in the
store and the job folder on the shared data directory, so a message delivered twice, or after
its job was deleted, is harmless: the worker's atomic claim in the store decides what runs
(``store.SharedJobStore.claim``).

Why these settings (a lost worker must never lose or silently duplicate a job):

- ``task_acks_late``: the message is acknowledged when the job has finished, not when it was
  received, so a worker that dies mid-job leaves its message unacknowledged in Redis.
- ``visibility_timeout`` = job time limit + ``QUANTCOMPARE_JOB_LOST_AFTER_S``: an unacknowledged
  message is handed to another worker only after its job could no longer be running anywhere
  (the running worker kills it at the time limit). Restored messages are swept every few seconds
  (``unacked_restore_*``), not every 100 s as kombu's defaults would.
- ``worker_prefetch_multiplier=1``: a worker reserves one message per free slot, so a busy
  worker never sits on jobs an idle one could run.
- ``task_reject_on_worker_lost`` and ``task_time_limit``: for a prefork pool they requeue a job
  whose child died and kill a hung child. ``quantcompare worker`` uses the threads pool with its
  own supervised processes (worker.py), which enforces the job time limit itself; the
  Celery limit stays as a backstop a little past ours.
"""

from __future__ import annotations

from celery import Celery

from service.config import Settings

QUEUE = "quantcompare"
TASK_RUN_JOB = "quantcompare.run_job"


def visibility_timeout_s(settings: Settings) -> float:
    return settings.job_timeout_s + settings.job_lost_after_s


def require_broker(settings: Settings) -> str:
    if not settings.broker_url:
        raise ValueError("the celery executor needs QUANTCOMPARE_BROKER_URL (e.g. redis://127.0.0.1:6379/0)")
    return settings.broker_url


def celery_app(settings: Settings) -> Celery:
    app = Celery("quantcompare", broker=require_broker(settings), set_as_current=False)
    restore_every = max(1.0, min(10.0, settings.job_lost_after_s / 2))
    app.conf.update(
        task_default_queue=QUEUE,
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,  # the store is the result backend
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_time_limit=int(visibility_timeout_s(settings)) + 60,
        worker_prefetch_multiplier=1,
        worker_cancel_long_running_tasks_on_connection_loss=False,  # jobs report to the store, not the broker
        worker_hijack_root_logger=True,
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,  # a worker waits out a broker restart
        broker_transport_options={
            "visibility_timeout": visibility_timeout_s(settings),
            "unacked_restore_interval": restore_every,
            "unacked_restore_throttle": 1,
            # A publish to a broker that vanished must fail fast (the API answers 503), not hang.
            "socket_timeout": 10,
            "socket_connect_timeout": 3,
            "health_check_interval": 10,
        },
    )
    return app
