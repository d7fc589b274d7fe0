"""fused_add_rmsnorm's two-pass form (RELOAD, docs/performance.md entry 31) on a GPU, through the
full correctness protocol (checked, not timed): every dtype, a width that leaves some threads a
partial last pass (5120 over 512 threads of 8-element vectors), one no vector divides but single
elements (4097), rows per CTA with a warp each, the row length compiled in, and the L2 hints."""

from __future__ import annotations

import pytest

from astra_kernels import suite
from astra_kernels.tools.measuring.worker import EvaluationWorker
from astra_kernels.tools.templating.template import Exclusion

pytestmark = pytest.mark.gpu

FOLDER = suite.load("fused_add_rmsnorm")
FORMS = [dict(ROW_THREADS=512, ROWS=1, VEC=8, REG_CAP=32, HINT=1, STATIC_ROW=1),
         dict(ROW_THREADS=256, ROWS=1, VEC=8, REG_CAP=128, HINT=0, STATIC_ROW=0),
         dict(ROW_THREADS=32, ROWS=4, VEC=4, REG_CAP=128, HINT=1, STATIC_ROW=0),
         dict(ROW_THREADS=128, ROWS=2, VEC=1, REG_CAP=64, HINT=0, STATIC_ROW=0)]
SHAPES = [{"T": 1, "H": 4096}, {"T": 7, "H": 5120}, {"T": 33, "H": 4097}, {"T": 130, "H": 8192}]


@pytest.fixture(scope="module")
def worker():
    with EvaluationWorker(timeout_s=600) as w:
        yield w


@pytest.mark.parametrize("dtype", FOLDER.spec.dtypes)
def test_the_two_pass_form_is_correct(worker, dtype):
    ran = []
    for shape in SHAPES:
        for form in FORMS:
            config = {**form, "ITEMS": 0, "PRELOAD_W": 0, "CLUSTER": 1, "RELOAD": 1}
            request = suite.request(FOLDER, "template", shape, dtype, "default", config,
                                    sms=worker.device["multiprocessors"], arch=worker.device["arch"],
                                    time=False, stream_timing=False)
            if isinstance(request, Exclusion):
                continue
            result = worker.evaluate(request)
            assert result.status == "ok", f"{FOLDER.spec.label(shape)} {config}: {result.status}: {result.message[:400]}"
            ran.append((FOLDER.spec.label(shape), form["ROW_THREADS"], form["VEC"]))
    assert len(ran) >= 10, ran  # every shape with some form, 4097 with single elements
    assert any(label.endswith("x4097") for label, _, _ in ran)
