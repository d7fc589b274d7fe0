"""A FlashInfer-Bench definition the project has never seen, end to end on a GPU: imported (the
family proven on the CPU), checked and tuned like any kernel folder, exported as a Solution, and
judged by FlashInfer-Bench's own evaluator (its Benchmark, as `flashinfer-bench run` calls it):
every workload PASSED. Needs flashinfer-bench (installed without flashinfer-python), apache-tvm-ffi
and nvcc, with which FlashInfer-Bench's TVM-FFI builder compiles the solution."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from astra_kernels import cli

from support import kernel_path
from support.fib_definitions import UNSEEN, workloads_file, write_definition

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
fib = pytest.importorskip("flashinfer_bench")
pytest.importorskip("tvm_ffi")

TOKENS = (1, 7, 300)


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("this PyTorch has no CUDA device")
    nvcc = shutil.which("nvcc")
    if nvcc is None and not os.environ.get("CUDA_HOME"):
        pytest.skip("FlashInfer-Bench's TVM-FFI builder needs nvcc (the CUDA toolkit)")
    if not os.environ.get("CUDA_HOME"):
        monkeypatch.setenv("CUDA_HOME", str(Path(nvcc).resolve().parent.parent))
    monkeypatch.setenv("FIB_CACHE_PATH", str(tmp_path / "fib-cache"))
    (tmp_path / "kernels").mkdir()
    yield from kernel_path.on_kernel_path(monkeypatch, tmp_path / "kernels")


def test_an_unseen_definition_is_imported_tuned_exported_and_passed_by_flashinfer_bench(on_path, capsys):
    tmp = on_path.parent
    name = UNSEEN["name"]
    definition = write_definition(tmp, UNSEEN)
    workloads = workloads_file(tmp / "workloads.jsonl", name, TOKENS, scalars={"epsilon": 1e-5})
    assert cli.main(["import-fib", str(definition), "--workloads", str(workloads), "--dir", str(on_path)]) == 0
    assert cli.main(["check", name, "--set", "workloads", "--samples", "3", "--json"]) == 0
    capsys.readouterr()
    assert cli.main(["tune", name, "--set", "workloads", "--seconds", "4", "--out", str(tmp / "tuned"), "--json"]) == 0
    capsys.readouterr()
    assert cli.main(["export", str(tmp / "tuned"), "--out", str(tmp / "export"), "--fib", str(tmp / "ts"), "--json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported["fib"]["traces"] == len(TOKENS)
    from flashinfer_bench import Benchmark, BenchmarkConfig, TraceSet

    traces = TraceSet.from_path(str(tmp / "ts"))
    ours = [s.name for s in traces.solutions[name]]
    bench = Benchmark(traces, BenchmarkConfig(warmup_runs=3, iterations=10, num_trials=2))
    try:
        result = bench.run_all(dump_traces=True)
    finally:
        bench.close()
    judged = [t for t in result.traces[name] if t.solution in ours]
    assert len(judged) == len(TOKENS), [t.evaluation.log for t in judged]
    assert {t.evaluation.status.value for t in judged} == {"PASSED"}, [t.evaluation.log[-2000:] for t in judged]
    assert all(t.evaluation.performance.latency_ms > 0 for t in judged)
