"""A stop (Ctrl-C, SIGTERM) leaves the terminal with the run's own words: the executors' callbacks
that fail once their pool is shut down report nothing while the stop is handled, and do again after."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

from astra_kernels.tools import concurrency


def _failing_callback_reports(caplog) -> int:
    caplog.clear()

    def fails(_future):
        raise RuntimeError("cannot schedule new futures after shutdown")

    with ThreadPoolExecutor(1) as pool:
        pool.submit(int).add_done_callback(fails)
    return sum(r.name == "concurrent.futures" for r in caplog.records)


def test_a_requested_stop_quiets_the_executors_callback_reports_until_it_is_cleared(caplog):
    caplog.set_level(logging.ERROR)
    assert _failing_callback_reports(caplog) == 1  # what Python prints to stderr, traceback and all
    try:
        concurrency.request_stop()
        assert _failing_callback_reports(caplog) == 0
    finally:
        concurrency.clear_stop()
    assert _failing_callback_reports(caplog) == 1
