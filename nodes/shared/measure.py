"""Evaluating a candidate at every shape: the tester's and the profiler's common ground.

A candidate is a kernel in the template format (tools/templating/template.py), so the baseline, a
direct rewrite (a template without parameters) and a tuned template all become evaluation requests
the same way, and every evaluation goes through the results store: a resumed run measures nothing
twice. The evaluator is the context's, else its EvaluatorSession's (astra_kernels/evaluators.py:
a replay of the context's `replay` recording, else one EvaluationWorker per GPU; the context's
session, else the process's, since a server runs many graphs), so nodes only borrow them.
"""

from __future__ import annotations

from astra_kernels.evaluators import EvaluatorSession, process_session, replayed
from astra_kernels import suite
from astra_kernels.tools.errors import AstraError
from astra_kernels.tools.measuring.probes import record_launch_floor
from astra_kernels.tools.measuring.worker import COMPILE_TIMEOUT_S, EvaluationWorker
from astra_kernels.tools.cluster.pool import LOST_RETRIES, KindView
from astra_kernels.tools.concurrency import map_in_threads
from astra_kernels.tools.search.runner import StoredEvaluator
from astra_kernels.tools.toolchain.compiler import compile_many
from astra_kernels.tools.templating.template import Exclusion, Template, TemplateError, parse_template

from astra_kernels.nodes.state import AgentState, Candidate, ShapeMeasurement

def session(context) -> EvaluatorSession:
    """The evaluator session the run borrows from: the context's, else this process's."""
    return context.session if context.session is not None else process_session()


def evaluator(context, kernel: str):
    """The context's evaluator, else a replay of `context.replay`, else the session's worker on
    the context's GPU. An evaluator handed over unstarted (`EvaluationWorker()` in a notebook)
    knows its device only once started, and the nodes read the device before evaluating: it is
    started here."""
    if context.evaluator is not None:
        if context.replay:
            raise AstraError(f"the context has both an evaluator and replay={context.replay!r}; pass one")
        if getattr(context.evaluator, "device", None) is None and callable(getattr(context.evaluator, "start", None)):
            context.evaluator.start()
        return context.evaluator
    if context.replay:
        return session(context).replay(kernel, context.results, context.replay)
    return session(context).worker(kernel, context.results, context.gpu, needs=(
        "the agent measures kernels, so it needs an NVIDIA GPU; none is visible here "
        "(pass an evaluator in the context to run it against recorded results)"))


def parallelism(context, kernel: str) -> int:
    """How many evaluations the evaluator runs at once: a cluster's workers of its GPU kind
    (tools/cluster/pool.py's KindView), else one."""
    return getattr(stored_evaluator(context, kernel).worker, "parallelism", 1)


def stored_evaluator(context, kernel: str) -> StoredEvaluator:
    worker = evaluator(context, kernel)
    return StoredEvaluator(worker, session(context).store(context.results), run_id="agent")


def parse_candidate(kernel: str, source: str) -> Template:
    """The candidate's source as a template of this kernel; TemplateError names the line."""
    return parse_template(source, "candidate.cu", suite.template_symbols(suite.load(kernel).spec))


def requests(context, kernel: str, dtype: str, shapes: list[dict[str, int]], candidate: Candidate,
             variant: str = "default", time: bool = True):
    """(the template, and per shape: its label, configuration, and request or Exclusion)."""
    folder = suite.load(kernel)
    worker = stored_evaluator(context, kernel).worker
    sms = worker.device.get("multiprocessors", suite.DEFAULT_SMS)
    arch = worker.device.get("arch")
    if candidate.origin == "baseline":
        which, template = "baseline", folder.baseline
    else:
        which, template = "template", parse_candidate(kernel, candidate.source)
    planned = []
    for shape in shapes:
        label = folder.spec.label(shape)
        config = candidate.configs.get(label) or template.default
        req = suite.request(folder, which, shape, dtype, variant, config if which == "template" else None,
                            sms=sms, arch=arch, source=template, check=True, time=time, stream_timing=False,
                            l2=context.l2)
        planned.append((shape, label, config, req))
    return template, planned


def precompile(context, kernel: str, dtype: str, shapes: list[dict[str, int]], candidates: list[Candidate]) -> None:
    """Compile every candidate at every shape in parallel before any is evaluated, so the GPU then
    takes them one after another from the compile cache (compile_side_by_side)."""
    compile_side_by_side(context, kernel, [(dtype, "default", shapes, c) for c in candidates])


def compile_side_by_side(context, kernel: str,
                         plans: list[tuple[str, str, list[dict[str, int]], Candidate]]) -> None:
    """Compile each plan's candidate at its shapes in its dtype and variant, all in parallel. Only
    for a worker that compiles (a replay answers from its recording, a scripted GPU from its
    script); failures are left for the evaluation to report, with its own message."""
    worker = stored_evaluator(context, kernel).worker
    if not isinstance(worker, (EvaluationWorker, KindView)) or replayed(worker):
        return
    pairs = []
    for dtype, variant, shapes, candidate in plans:
        try:
            _, planned = requests(context, kernel, dtype, shapes, candidate, variant)
        except TemplateError:
            continue
        pairs += [(req.source, req.options) for *_, req in planned if not isinstance(req, Exclusion)]
    if len(pairs) > 1:
        compile_many(pairs, timeout_s=COMPILE_TIMEOUT_S)


def evaluate(context, kernel: str, dtype: str, shapes: list[dict[str, int]], candidate: Candidate, *,
             time: bool = True, variant: str = "default") -> Candidate:
    """The candidate checked and timed at every shape in one evaluation each (its `configs`, else
    its template's default): the outputs of the timed launches are checked too, as the tuner's
    are, so a kernel that is only correct when checked cannot win. `time=False` checks only
    (the kernel's odd shapes). A shape the replayed recording lacks is "unrecorded", and a
    candidate with one is "unmeasured": not wrong, so never sent back to be fixed. A shape its
    `//@ require` lines exclude is "excluded": served by another kernel of the front. The agent
    runs the kernel's default variant; odd_shapes checks the others (`variant`)."""
    run = stored_evaluator(context, kernel)
    try:
        _, planned = requests(context, kernel, dtype, shapes, candidate, variant, time)
    except TemplateError as exc:
        return candidate.model_copy(update={"verdict": "invalid", "message": str(exc)})
    def measure(item):
        shape, label, config, req = item
        if isinstance(req, Exclusion):
            return None
        return run(req, kernel=kernel, which=candidate.origin, config=config, shape=shape, dtype=dtype,
                   variant=variant)[0]

    results = map_in_threads(measure, planned, parallelism(context, kernel))  # the shapes at once on a cluster
    measurements, first, seconds, bandwidth = [], None, 0.0, None
    for (shape, label, config, req), result in zip(planned, results):
        if isinstance(req, Exclusion):
            measurements.append(ShapeMeasurement(label=label, status="excluded", config=config,
                                                 message=f"the template excludes {config} here: {req.reason}"))
            continue
        seconds += result.wall_seconds or 0.0
        bandwidth = bandwidth or result.copy_bandwidth_gbs
        first = first or (result if result.kernel_info is not None else None)
        failed = "; ".join(c.detail for c in result.checks if not c.passed)
        measurements.append(ShapeMeasurement(
            label=label, status=result.status, config=config,
            median_us=result.timing.median_us if result.status == "ok" and result.timing else None,
            fraction_of_copy_bandwidth=result.fraction_of_copy_bandwidth,
            floor_us=result.mix_floor_us or result.floor_us,  # a recording from before the mix floor has the copy's
            message=(failed or result.message)[:1500],
            registers=result.kernel_info.resources.registers if result.kernel_info else None,
            occupancy_blocks_per_sm=result.occupancy_blocks_per_sm,
        ))
    update: dict = {"measurements": measurements, "gpu_seconds": candidate.gpu_seconds + seconds,
                    "copy_bandwidth_gbs": candidate.copy_bandwidth_gbs or bandwidth}
    if first is not None:
        update.update(registers=first.kernel_info.resources.registers, spills=first.kernel_info.resources.spills,
                      occupancy_blocks_per_sm=first.occupancy_blocks_per_sm)
    # A shape the kernel's own constraints exclude is one it does not serve (the front keeps what
    # serves it there), not a failure; a kernel that serves no shape at all is unusable.
    bad = next((m for m in measurements if m.status not in ("ok", "unrecorded", "excluded", "lost")), None)
    if bad is None and measurements and all(m.status == "excluded" for m in measurements):
        update["verdict"] = "invalid"
        update["message"] = "its constraints exclude every shape: " + "; ".join(
            f"{m.label}: {m.message}" for m in measurements[:3])
    elif bad is not None:
        update["verdict"] = "compile_error" if bad.status in ("compile_error", "compile_timeout") else "incorrect"
        update["message"] = f"at shape {bad.label} ({bad.config}): {bad.status}: {bad.message}"
    elif lost := [m.label for m in measurements if m.status == "lost"]:
        update["verdict"] = "unmeasured"
        update["message"] = ("the cluster lost the workers measuring it at " + ", ".join(lost)
                             + f" ({1 + LOST_RETRIES} tries each); no verdict on the kernel")
    elif any(m.status == "unrecorded" for m in measurements):
        update["verdict"] = "unmeasured"
        update["message"] = ("the recording has no measurement of this kernel at "
                             + ", ".join(m.label for m in measurements if m.status == "unrecorded")
                             + " (a replay answers only what was measured on the GPU)")
    else:
        update["verdict"] = "passed"
    return candidate.model_copy(update=update)


def launch_floor_us(context, kernel: str) -> float | None:
    """An empty kernel's time under the same CUDA-graph replay: below it no kernel can go, so
    at small shapes it, not bandwidth, is the floor. None where it cannot be measured (a replay
    holds no such measurement, but may hold the launch floor measured beside it: ReplayWorker's
    device facts). Measured here, it is recorded with the results store's measurements, so a
    replay of that store has it."""
    run = stored_evaluator(context, kernel)
    worker = run.worker
    if replayed(worker):
        return (worker.device or {}).get("launch_floor_us")
    if not isinstance(worker, (EvaluationWorker, KindView)):
        return None
    return record_launch_floor(worker, run.store)


def odd_shapes(context, state: AgentState, candidate: Candidate) -> Candidate:
    """The candidate checked (not timed) where the run does not time it but a kernel dropped into
    SGLang runs: at the kernel's `odd` shapes (widths that are not a multiple of a vector, a single
    token), and in every other dtype and variant of the kernel (at the odd shapes, else the run's),
    since the candidate replaces the kernel in all of them. Each configuration the candidate runs
    at some shape is checked (a direct rewrite has one, its default). Returns it with `odd_shapes`
    set: "passed" (naming the shapes its own constraints exclude), "excluded", "unmeasured" (a
    replay without them), or the failure, which makes it incorrect."""
    spec = suite.load(state["kernel"]).spec
    run_labels = {spec.label(s) for s in state["shapes"]}
    odd = [s for s in spec.shapes.get("odd", []) if spec.label(s) not in run_labels]
    configs = list({tuple(sorted(c.items())): c for c in candidate.configs.values()}.values()) or [{}]
    checks = [(state["dtype"], "default", odd)] + [
        (dtype, variant, odd or state["shapes"]) for dtype in spec.dtypes for variant in spec.variants
        if (dtype, variant) != (state["dtype"], "default")]
    checks = [(dtype, variant, shapes) for dtype, variant, shapes in checks if shapes]
    if not checks:
        return candidate

    def at(config, shapes) -> Candidate:  # {}: the template at its default configuration
        return candidate.model_copy(update={"configs": {spec.label(s): config for s in shapes} if config else {}})

    compile_side_by_side(context, state["kernel"], [  # dozens of binaries: compiled at once first
        (dtype, variant, shapes, at(c, shapes)) for dtype, variant, shapes in checks for c in configs])
    update = {"gpu_seconds": candidate.gpu_seconds}
    excluded, unmeasured = set(), False
    for dtype, variant, shapes in checks:
        for config in configs:
            checked = evaluate(context, state["kernel"], dtype, shapes, at(config, shapes), time=False, variant=variant)
            update["gpu_seconds"] += checked.gpu_seconds - candidate.gpu_seconds
            if checked.verdict in ("passed", "unmeasured") or (checked.verdict == "invalid" and checked.measurements
                                                                and all(m.status == "excluded" for m in checked.measurements)):
                unmeasured = unmeasured or checked.verdict == "unmeasured"
                excluded |= {m.label for m in checked.measurements if m.status == "excluded" and dtype == state["dtype"]
                             and variant == "default"}
                continue
            where = "" if (dtype, variant) == (state["dtype"], "default") else f" in {dtype} ({variant})"
            update.update(verdict=checked.verdict, odd_shapes=f"failed{where} {checked.message[:300]}",
                          message=f"(an odd shape, not timed) {checked.message}" if not where else
                          f"(not timed, in {dtype}, variant {variant}, which the kernel also serves) {checked.message}")
            return candidate.model_copy(update=update)
    odd_labels = {spec.label(s) for s in odd}
    if unmeasured:
        update["odd_shapes"] = "unmeasured"
    elif odd_labels and excluded >= odd_labels:
        update["odd_shapes"] = f"excluded: it runs at none of {', '.join(sorted(excluded))}"
    else:
        update["odd_shapes"] = "passed" + (f" where it runs; it excludes {', '.join(sorted(excluded))}" if excluded else "")
    return candidate.model_copy(update=update)
