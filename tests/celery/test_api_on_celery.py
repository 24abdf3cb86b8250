"""tests/api's HTTP tests, run against the Celery executor (server/client from conftest.py).

Left out, and why: upload limits, API memory, OpenAPI, the token and bad-request tables are the
API process's alone (no job reaches an executor); /metrics' worker gauges and stage histograms
come from the local pool's supervisor (a Celery worker keeps its own); the 503/429 and restart
tests start servers of their own with the local pool (test_celery_faults.py has the Celery ones).
"""

from test_http_api import (  # noqa: F401  (collected here, with this folder's fixtures)
    test_a_job_past_the_time_limit_is_killed,
    test_a_segfaulting_job_fails_alone_and_the_service_goes_on,
    test_artifacts_are_listed_and_downloaded_with_sensible_names,
    test_examples_and_versions,
    test_killing_a_worker_mid_job_fails_only_that_job,
    test_report_page_renders_a_sparse_report_and_a_failed_job,
    test_submit_returns_202_with_location_then_the_job_finishes,
    test_unknown_things_are_404_problems,
    test_user_errors_and_internal_errors_in_a_job,
    test_wait_returns_200_with_the_report_and_the_same_input_is_cached,
)
