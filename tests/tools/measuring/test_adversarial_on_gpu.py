"""The adversarial kernels (support/adversarial.py) through the ordinary evaluation, on a GPU.

Each is a kernel a cheating optimiser would write: correct in the launches the checks see, and
"fast" in the timed ones by skipping work, memoising, reusing another set's results or keeping
state across launches. The evaluation every command uses (an EvaluationWorker running
tools/measuring/evaluation.py: `astra check`, `astra tune` and `astra optimize` all send their
candidates there) must reject each with the reason named, and pass the honest kernel at both
sizes (so the physical-floor flag does not fire on honest work). Run with -s for the table that
docs/reliability.md publishes.
"""

from __future__ import annotations

import pytest

from support import adversarial
from astra_kernels.tools.measuring.worker import EvaluationWorker

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def worker():
    with EvaluationWorker(timeout_s=300) as w:
        yield w


def test_every_adversarial_kernel_is_rejected_with_its_reason(worker):
    problems, table = [], []
    for name, variant, n, status, needles, failed_check in adversarial.CASES:
        result = worker.evaluate(adversarial.request(variant, n))
        median = result.timing.median_us if result.timing else None
        table.append((name, n, result.status, median, result.mix_floor_us, result.message[:200]))
        if result.status != status:
            problems.append(f"{name}: status {result.status}, expected {status}: {result.message[:600]}")
            continue
        missing = [w for w in needles if w not in result.message]
        if missing:
            problems.append(f"{name}: the message lacks {missing}: {result.message[:600]}")
        failed = [c.name for c in result.checks if not c.passed]
        if failed_check is not None and failed_check not in failed:
            problems.append(f"{name}: no failed check {failed_check!r} among {failed}")
        if status == "ok" and (failed or not result.correct):
            problems.append(f"{name}: the honest kernel has failed checks {failed}")
    print("\n| kernel | elements | status | median us | floor us | message |\n|---|---|---|---|---|---|")
    for name, n, status, median, floor, message in table:
        first = message.splitlines()[0] if message else ""
        print(f"| {name} | {n} | {status} | {median and f'{median:.2f}'} | {floor and f'{floor:.2f}'} | {first} |")
    assert not problems, "\n".join(problems)


def test_a_kernel_correct_only_at_the_timed_shape_is_caught_at_an_odd_one(worker):
    """No evaluation at one shape can see a kernel special-cased for it; an evaluation at another
    shape does, which is why configurations must be checked at the odd shapes too."""
    timed = worker.evaluate(adversarial.request(adversarial.TIMED_SHAPE_ONLY, 1 << 18))
    assert timed.status == "ok", timed.message
    odd = worker.evaluate(adversarial.request(adversarial.TIMED_SHAPE_ONLY, adversarial.SMALL))
    assert odd.status == "incorrect" and "NaN" in odd.message, odd.message
