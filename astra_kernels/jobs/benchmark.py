"""`astra bench` (and bench/astra_bench.py): every kernel and shape timed side by side, in one worker
on one GPU, against the two floors.

Per shape: the SGLang baseline, the tuned kernel (the dispatch table's pick; at a tuned shape
that is the per-shape best), the PyTorch peer (SGLang's own PyTorch path) eager and under
torch.compile when PyTorch with CUDA is installed, two floors and the launch floor (an empty
kernel, replayed the same way): the copy floor (bytes moved over the copy bandwidth) and the
physical floor (bytes moved over the best streaming of the kernel's own read/write mix, which a
read-heavy kernel can beat the copy floor toward), both measured in this process; and the copy
and the mix probe timed at the kernel's own bytes: at small shapes a floor assumes a bandwidth
no kernel of that size reaches, and the probes show what moving those bytes alone costs there.
Every time is a CUDA-graph replay median after the correctness checks passed, in one L2 regime
(`l2`: cold, rotating inputs; warm, inputs resident), so the columns compare like with like.
The summary states the goals as measured: never slower than the baseline, nor than the best
peer at each shape, the speedup at Astra's shapes, the fraction of the mix bandwidth at large
shapes, and decode shapes against the launch floor.
"""

from __future__ import annotations

import importlib.util
import json
import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, Field

from astra_kernels.defaults import TIMING_NOISE
from . import charts as plots
from astra_kernels.tools.measuring.evaluation import EvaluationResult
from astra_kernels.tools.measuring.worker import EvaluationWorker
from astra_kernels.tools.measuring.probes import copy_request, empty_request, mix_requests
from astra_kernels.tools.templating.template import Exclusion, Template

from astra_kernels import suite
from astra_kernels.suite import tuned_tables
from astra_kernels.runtime.dispatch import DispatchTable
from .generated_files import md_code, md_text
from . import peer_builds
from .torch_peers import PeerResult, measure_peer
from .tuning import draw_ahead

ASTRA_KERNELS = ("silu_and_mul", "fused_add_rmsnorm", "merge_attn_states")
LARGE_FLOOR_US = 20.0  # shapes whose memory floor is at least this must reach BANDWIDTH_GOAL
BANDWIDTH_GOAL = 0.95  # of the kernel's own mix bandwidth (issue 18)
DECODE_TOKENS = 16  # shapes of at most this many tokens must come within DECODE_GOAL of the launch floor
DECODE_GOAL = 1.3
SPEEDUP_GOAL = 1.5  # geometric mean over Astra's shapes, over SGLang's kernel (issue 18)
PEER_SPEEDUP_GOAL = 1.15  # the same over the fastest peer at each shape
# Issue 42's goal over the token axis: behind the fastest peer by no more than this or the spread,
# whichever is larger, at every token count of every width (a sweep: `--set sweep`).
SWEEP_MARGIN = 0.02


def shipped_table(kernel: str, device_name: str, l2: str = "cold") -> DispatchTable | None:
    """The dispatch table recorded for this kernel on this kind of GPU in L2 regime `l2`, shipped
    with the package."""
    key = tuned_tables.device_key(device_name)
    path = tuned_tables.table_path(kernel, key or "none", l2)
    return DispatchTable.model_validate_json(path.read_text()) if path.is_file() else None


def shipped_table_for(kernel: str, device_name: str, dtype: str, variant: str, l2: str) -> DispatchTable | None:
    """The shipped table of this kernel for this GPU kind in `dtype` and `variant`: the one tuned in
    regime `l2`, else the one tuned in the other (its configurations run correctly in either regime;
    a caller that measures them measures them in its own). `astra tune --start shipped` and the
    agent's search floor start from it."""
    candidates = (shipped_table(kernel, device_name, regime) for regime in tuned_tables.preferred_regimes(l2))
    return next((t for t in candidates if t is not None and (t.dtype, t.variant) == (dtype, variant)), None)


def bench_tables(names: list[str], device_name: str, l2: str, tuned: Path | None = None) -> dict[str, DispatchTable | None]:
    """Each kernel's table for a benchmark in regime `l2`: from `tuned` where it has one (`tuned` is
    `astra tune`'s --out folder, as `astra verify` and `astra export` take it, or a folder of them,
    one KERNEL/ each), else the table shipped for this GPU tuned in `l2`, else the one shipped tuned
    in the other regime, else None (no tuned column). The regime each table was tuned in goes into
    the report (BenchReport.table_l2), so a mismatch is never silent."""
    tables = {}
    single = load_table(tuned) if tuned and (Path(tuned) / "dispatch.json").is_file() else None
    for name in names:
        if single is not None and single.kernel == name:
            tables[name] = single
            continue
        path = tuned / name if tuned else None
        if path and path.exists():
            tables[name] = load_table(path)
            continue
        tables[name] = next((t for r in tuned_tables.preferred_regimes(l2)
                             if (t := shipped_table(name, device_name, r)) is not None), None)
    return tables


def load_table(path: Path) -> DispatchTable:
    """A dispatch table from `astra tune`'s output folder (its dispatch.json) or a JSON file."""
    path = Path(path)
    file = path / "dispatch.json" if path.is_dir() else path
    if not file.is_file():
        raise suite.AstraError(f"no dispatch table at {file}: give `astra tune`'s --out folder or its dispatch.json")
    return DispatchTable.model_validate_json(file.read_text())


class BenchRow(BaseModel):
    kernel: str
    label: str
    shape: dict[str, int]
    dtype: str
    variant: str
    bytes_moved: int
    floor_us: float | None = None
    baseline_us: float | None = None
    baseline_spread: float | None = None
    baseline_status: str = ""
    tuned_us: float | None = None
    tuned_spread: float | None = None
    tuned_status: str = ""
    tuned_config: dict[str, int] = Field(default_factory=dict)
    tuned_picked_by: str = ""
    torch_eager_us: float | None = None
    torch_eager_spread: float | None = None
    torch_eager_status: str = ""
    torch_compile_us: float | None = None
    torch_compile_spread: float | None = None
    torch_compile_status: str = ""
    sglang_us: float | None = None  # docs/kernels.md's anchor for this device, when it has one
    # SGLang's own kernel, its source as it ships (a folder from `astra import-sglang` on the kernel path)
    sglang_jit_us: float | None = None
    sglang_jit_spread: float | None = None
    sglang_jit_status: str = ""
    copy_us: float | None = None  # a vector copy of the same bytes (half read, half written)
    mix: str = ""  # the kernel's read:write mix as the probe streams it, "2:1"
    mix_floor_us: float | None = None  # bytes moved over the mix bandwidth: the physical floor
    mix_us: float | None = None  # the mix probe at the kernel's own read and write bytes
    # The same three launched with programmatic dependent launch (--pdl; tools/toolchain/pdl.py): reported
    # beside the plain times, never mixed into the speedup, so each comparison has PDL on both sides.
    baseline_pdl_us: float | None = None
    tuned_pdl_us: float | None = None
    copy_pdl_us: float | None = None
    pdl_status: str = ""
    measured: str = ""  # when this row was measured (ISO, UTC); a resumed report's rows span calls
    # Wall seconds of this row's parts ("baseline", "probes", "tuned", "sglang_jit", "pdl", "torch_eager",
    # "torch_compile", and of that "torch_compile_build", the compile): where a benchmark's time goes.
    seconds: dict[str, float] = Field(default_factory=dict)

    @property
    def tuned_column(self) -> dict[str, int] | str:
        """What this row's tuned column ran, in tuned_column's terms: its configuration, EXCLUDED or NO_TABLE."""
        if self.tuned_status == "":
            return NO_TABLE
        if self.tuned_status.startswith("excluded"):
            return EXCLUDED
        if self.tuned_config:  # (a named source's pick never equals a table's column: tuned_column names it)
            try:  # a row measured before the template gained a parameter ran it at its default
                return suite.load(self.kernel).template.filled(self.tuned_config)
            except suite.AstraError:
                pass
        return self.tuned_config

    @property
    def speedup(self) -> float | None:
        return self.baseline_us / self.tuned_us if self.baseline_us and self.tuned_us else None

    @property
    def slower(self) -> bool:
        """Slower than the baseline by more than the timing spread of either measurement (docs/design.md:
        versions are compared only beyond the spread of timing one of them twice)."""
        if self.speedup is None:
            return False
        noise = max(self.baseline_spread or 0.0, self.tuned_spread or 0.0, TIMING_NOISE)
        return self.tuned_us > self.baseline_us * (1.0 + noise)

    @property
    def fraction_of_copy_bandwidth(self) -> float | None:
        return self.floor_us / self.tuned_us if self.floor_us and self.tuned_us else None

    @property
    def fraction_of_mix_bandwidth(self) -> float | None:
        return self.mix_floor_us / self.tuned_us if self.mix_floor_us and self.tuned_us else None

    def peers(self) -> dict[str, float]:
        """Every measured alternative a user could pick here, by name (quoted figures excluded)."""
        named = {"SGLang baseline": self.baseline_us, "SGLang JIT": self.sglang_jit_us,
                 "torch eager": self.torch_eager_us, "torch.compile": self.torch_compile_us}
        return {name: us for name, us in named.items() if us}

    @property
    def best_peer(self) -> tuple[str, float] | None:
        peers = self.peers()
        return min(peers.items(), key=lambda item: item[1]) if peers else None

    @property
    def speedup_over_best_peer(self) -> float | None:
        best = self.best_peer
        return best[1] / self.tuned_us if best and self.tuned_us else None

    @property
    def slower_than_best_peer(self) -> bool:
        """Slower than the fastest peer by more than the timing spread of either measurement (the
        project's noise bound where a spread was not recorded)."""
        return self.slower_than_best_peer_by(TIMING_NOISE)

    def slower_than_best_peer_by(self, margin: float) -> bool:
        """Slower than the fastest peer by more than `margin` or the timing spread of either
        measurement, whichever is larger."""
        best = self.best_peer
        if best is None or not self.tuned_us:
            return False
        spreads = {"SGLang baseline": self.baseline_spread, "SGLang JIT": self.sglang_jit_spread,
                   "torch eager": self.torch_eager_spread, "torch.compile": self.torch_compile_spread}
        noise = max(self.tuned_spread or 0.0, spreads[best[0]] or 0.0, margin)
        return self.tuned_us > best[1] * (1.0 + noise)

    @property
    def tokens(self) -> int:
        return next(iter(self.shape.values()))


class BenchReport(BaseModel):
    device: str
    arch: str
    date: str
    dtype: str
    l2: str = "cold"  # the L2 regime of every time in the report
    copy_bandwidth_gbs: float | None = None
    launch_floor_us: float | None = None
    launch_floor_pdl_us: float | None = None  # the empty kernel chained with PDL (--pdl)
    torch_version: str = ""
    sglang_jit: dict[str, str] = Field(default_factory=dict)  # kernel -> "SGLang 0.5.23, <file>" timed as its column
    table_l2: dict[str, str] = Field(default_factory=dict)  # kernel -> the L2 regime its tuned column's table was tuned in
    commands: list[str] = Field(default_factory=list)  # what measured these rows
    # How the rows were measured (run_settings): a resumed run must measure as the kept rows were
    settings: dict[str, str] = Field(default_factory=dict)
    # Wall seconds spent before the rows, by part ("torch_compile_build_ahead": peer_builds.py)
    ahead_seconds: dict[str, float] = Field(default_factory=dict)
    rows: list[BenchRow] = Field(default_factory=list)

    def goals(self) -> list[str]:
        """The goals (issues 5 and 18) as this run measured them, one line each."""
        lines = []
        slower = [r for r in self.rows if r.slower]
        timed = [r for r in self.rows if r.speedup is not None]
        ties = [r for r in timed if r.speedup < 1.0 and not r.slower]
        lines.append(f"never slower than the baseline: {len(timed) - len(slower)} of {len(timed)} shapes"
                     + (" (slower: " + ", ".join(f"{r.kernel} {r.label} {r.speedup:.3f}x" for r in slower) + ")"
                        if slower else "")
                     + (f"; {len(ties)} within the timing spread of it (" +
                        ", ".join(f"{r.kernel} {r.label} {r.speedup:.3f}x" for r in ties) + ")" if ties else ""))
        compared = [r for r in self.rows if r.speedup_over_best_peer is not None]
        behind = [r for r in compared if r.slower_than_best_peer]
        if compared:
            lines.append(f"never slower than the fastest peer at the shape: {len(compared) - len(behind)} of "
                         f"{len(compared)} shapes" + (" (slower: " + ", ".join(
                             f"{r.kernel} {r.label} {r.speedup_over_best_peer:.3f}x of {r.best_peer[0]}"
                             for r in behind) + ")" if behind else ""))
        astra = [r for r in self.rows if r.kernel in ASTRA_KERNELS and r.speedup
                 and r.shape in suite.load(r.kernel).spec.shapes.get("astra", [])]
        if astra:
            bound = [r.baseline_us / r.copy_us for r in astra if r.copy_us]
            lines.append(f"Astra's shapes of its three kernels: geometric-mean speedup "
                         f"{_geomean([r.speedup for r in astra]):.3f}x over {len(astra)} shapes (goal {SPEEDUP_GOAL}x)"
                         + (f"; a plain copy of the same bytes would be {_geomean(bound):.3f}x" if len(bound) == len(astra)
                            else ""))
            over_peer = [r.speedup_over_best_peer for r in astra if r.speedup_over_best_peer]
            if len(over_peer) == len(astra):
                # the fastest peer over what streaming the shape's own bytes in its own mix takes: the
                # figure a kernel that only moves its bytes would reach (where 1.15x lies beyond it)
                probed = [r.best_peer[1] / r.mix_us for r in astra if r.mix_us]
                lines.append(f"Astra's shapes over the fastest peer at each: geometric mean {_geomean(over_peer):.3f}x "
                             f"(goal {PEER_SPEEDUP_GOAL}x)"
                             + (f"; a kernel as fast as the same-mix probe of its bytes would be {_geomean(probed):.3f}x"
                                if len(probed) == len(astra) else ""))
        large = [r for r in self.rows if r.mix_floor_us and r.mix_floor_us >= LARGE_FLOOR_US and r.fraction_of_mix_bandwidth]
        if large:
            short = [r for r in large if r.fraction_of_mix_bandwidth < BANDWIDTH_GOAL]
            lines.append(f"physical floor >= {LARGE_FLOOR_US:g} us: {len(large) - len(short)} of {len(large)} shapes at "
                         f">= {BANDWIDTH_GOAL:.0%} of the bandwidth of their own read/write mix" + (
                             " (below: " + ", ".join(f"{r.kernel} {r.label} {r.fraction_of_mix_bandwidth:.1%}"
                                                     for r in short) + ")" if short else ""))
        if self.launch_floor_us:
            decode = [r for r in self.rows if r.tokens <= DECODE_TOKENS and r.tuned_us]
            far = [r for r in decode if r.tuned_us > DECODE_GOAL * self.launch_floor_us]
            if decode:
                copies = [r.copy_us / self.launch_floor_us for r in decode if r.copy_us]
                lines.append(f"decode shapes (<= {DECODE_TOKENS} tokens): {len(decode) - len(far)} of {len(decode)} "
                             f"within {DECODE_GOAL}x of the launch floor ({self.launch_floor_us:.2f} us)" + (
                                 " (beyond: " + ", ".join(f"{r.kernel} {r.label} {r.tuned_us / self.launch_floor_us:.2f}x"
                                                          for r in far) + ")" if far else "")
                             + (f"; a plain copy of the same bytes takes {min(copies):.2f}x to {max(copies):.2f}x of it"
                                if copies else ""))
            pdl = [r for r in decode if r.tuned_pdl_us]
            if pdl:
                near = [r for r in pdl if r.tuned_pdl_us <= DECODE_GOAL * self.launch_floor_us]
                ratios = [r.tuned_pdl_us / self.launch_floor_us for r in pdl]
                lines.append(f"with PDL on (tools/toolchain/pdl.py): {len(near)} of {len(pdl)} decode shapes within {DECODE_GOAL}x of "
                             f"the plain launch floor ({min(ratios):.2f}x to {max(ratios):.2f}x)"
                             + (f"; the PDL-chained empty kernel replays at {self.launch_floor_pdl_us:.2f} us"
                                if self.launch_floor_pdl_us else "")
                             + "; PDL speedup of the tuned kernel over its plain launch "
                             f"{_geomean([r.tuned_us / r.tuned_pdl_us for r in pdl]):.3f}x (geometric mean)")
        lines += self.per_width()
        return lines

    def time_spent(self) -> str:
        """Where this benchmark's wall time went, summed over its rows by part (BenchRow.seconds); empty
        for reports from before rows kept it."""
        spent: dict[str, float] = {}
        for r in self.rows:
            for part, seconds in r.seconds.items():
                spent[part] = spent.get(part, 0.0) + seconds
        lines = []
        if spent:
            lines.append(f"wall seconds by part over {sum(1 for r in self.rows if r.seconds)} shapes: "
                         + ", ".join(f"{part} {seconds:.0f}" for part, seconds in spent.items())
                         + (" (a peer's build is part of its seconds)" if any(p.endswith("_build") for p in spent) else ""))
        if self.ahead_seconds:
            lines.append("before the rows: " + ", ".join(f"{part} {seconds:.0f}"
                                                        for part, seconds in self.ahead_seconds.items()))
        return "; ".join(lines)

    def per_width(self) -> list[str]:
        """Issue 42's counts, one line per kernel and width (the shape but its token count) timed at
        several token counts: at how many the table is behind the fastest peer by more than the larger
        of SWEEP_MARGIN and either spread, and its geometric mean over that peer."""
        groups: dict[tuple[str, str], list[BenchRow]] = {}
        for r in self.rows:
            if r.speedup_over_best_peer is not None:
                width = "x".join(str(v) for v in list(r.shape.values())[1:])
                groups.setdefault((r.kernel, width), []).append(r)
        lines = []
        for (kernel, width), rows in groups.items():
            if len(rows) < 2:
                continue
            behind = [r for r in rows if r.slower_than_best_peer_by(SWEEP_MARGIN)]
            worst = min(rows, key=lambda r: r.speedup_over_best_peer)
            lines.append(f"{kernel} at width {width}, {len(rows)} token counts: behind the fastest peer by more than "
                         f"{SWEEP_MARGIN:.0%} or the spread at {len(behind)}, geometric mean "
                         f"{_geomean([r.speedup_over_best_peer for r in rows]):.3f}x over it (worst "
                         f"{worst.tokens} tokens {worst.speedup_over_best_peer:.3f}x of {worst.best_peer[0]})")
        return lines


def _row_key(row: BenchRow) -> tuple:
    return row.kernel, row.label, row.dtype, row.variant


def measured_twice(reports: list[BenchReport]) -> list[str]:
    """`kernel label` of every row more than one report measured: merge keeps the newest run's."""
    seen, twice = set(), []
    for row in (row for r in reports for row in r.rows):
        if _row_key(row) in seen and f"{row.kernel} {row.label}" not in twice:
            twice.append(f"{row.kernel} {row.label}")
        seen.add(_row_key(row))
    return twice


def merge(reports: list[BenchReport]) -> BenchReport:
    """Several runs on one kind of GPU as one report (a suite split over calls, say). A kernel and
    shape that several runs measured is one row, the newest run's: two rows of one shape would
    count it twice in the summary."""
    if not reports:
        raise suite.AstraError("no benchmark report to merge")
    devices = {r.device for r in reports}
    if len(devices) > 1:
        raise suite.AstraError(f"benchmark reports from different GPUs cannot be merged: {', '.join(sorted(devices))}")
    regimes = {r.l2 for r in reports}
    if len(regimes) > 1:
        raise suite.AstraError("benchmark reports of different L2 regimes cannot be merged: "
                               f"{', '.join(sorted(regimes))} (show them side by side instead)")
    first = reports[0]
    newest, table_l2 = {}, {}
    for report in sorted(reports, key=lambda r: r.date):  # later runs replace earlier ones
        for row in report.rows:
            newest[_row_key(row)] = row
        for kernel, l2 in report.table_l2.items():
            if table_l2.setdefault(kernel, l2) != l2:
                raise suite.AstraError(f"benchmark reports whose {kernel} tables were tuned in different L2 regimes "
                                       "cannot be merged (show them side by side instead)")
    order = list(dict.fromkeys(_row_key(row) for r in reports for row in r.rows))
    settings = {json.dumps(r.settings, sort_keys=True) for r in reports if r.settings}
    floors = [r.launch_floor_us for r in reports if r.launch_floor_us]
    pdl_floors = [r.launch_floor_pdl_us for r in reports if r.launch_floor_pdl_us]
    bandwidths = [r.copy_bandwidth_gbs for r in reports if r.copy_bandwidth_gbs]
    return first.model_copy(update={
        "rows": [newest[key] for key in order],
        "launch_floor_us": min(floors) if floors else None,
        "launch_floor_pdl_us": min(pdl_floors) if pdl_floors else None,
        "copy_bandwidth_gbs": max(bandwidths) if bandwidths else None,
        "date": min(r.date for r in reports),
        "torch_version": next((r.torch_version for r in reports if r.torch_version), ""),
        "sglang_jit": {k: v for r in reports for k, v in r.sglang_jit.items()},
        "table_l2": table_l2,
        "commands": [c for r in reports for c in r.commands],
        "ahead_seconds": {part: round(sum(r.ahead_seconds.get(part, 0.0) for r in reports), 3)
                          for part in dict.fromkeys(p for r in reports for p in r.ahead_seconds)},
        # one set of choices where all the runs said theirs and agreed; else none is claimed
        "settings": json.loads(settings.pop()) if len(settings) == 1 and all(r.settings for r in reports) else {},
    })


def _geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def _time_of(result: EvaluationResult) -> tuple[float | None, float | None, str]:
    if result.status == "ok" and result.timing:
        return result.timing.median_us, result.timing.spread, "ok"
    return None, None, f"{result.status}: {result.message[:300]}"


NO_TABLE, EXCLUDED = "no table", "excluded"


def tuned_column(table: DispatchTable | None, shape: dict[str, int], sms: int, arch: str) -> dict[str, int] | str:
    """What a benchmark's tuned column runs at `shape` under `table`: the pick's configuration (the
    baseline's is {}), EXCLUDED where the table runs nothing there, NO_TABLE without a table. A pick of
    another template source than the kernel's own is named by that source, so no row's column
    (BenchRow.tuned_column) equals it. `astra bench --resume` and bench/sweep_status.py compare a kept
    row with what the table runs today by these two."""
    if table is None:
        return NO_TABLE
    try:
        pick = table.pick(shape, sms, arch)
    except suite.AstraError:
        return EXCLUDED
    return pick.config if pick.source in ("template", "baseline") else f"source {pick.source}"


def run_settings(torch_modes: tuple[str, ...], input_layout: str, pdl: bool) -> dict[str, str]:
    """The choices that change what a row holds or how it was timed, beside GPU, regime and dtype:
    `astra bench --resume` refuses to add rows measured otherwise to a report's."""
    return {"torch": ",".join(sorted(set(torch_modes))) or "none", "layout": input_layout, "pdl": "on" if pdl else "off"}


def bench(worker, kernels: dict[str, list[dict[str, int]]], *, dtype: str = "bf16",
          tables: dict[str, DispatchTable | None] | None = None, torch_modes: tuple[str, ...] = ("eager", "compile"),
          input_layout: str = "arena", pdl: bool = False, progress: Callable[[str], None] | None = None,
          checkpoint: Callable[[BenchReport], None] | None = None, command: str = "",
          l2: str = "cold") -> BenchReport:
    """Time every (kernel, shape) of `kernels` on the worker's GPU; see the module docstring.

    `tables` maps a kernel to its dispatch table (None: no tuned column for it). Each kernel's
    dtype is `dtype` when it runs in it, else its first. `checkpoint(report)` is called after
    each row, so a run cut short keeps what it measured. `pdl` adds the baseline, the tuned
    kernel and the copy launched with programmatic dependent launch, as separate columns. `l2`
    is the regime of every time ("cold" or "warm", as EvaluationRequest.l2).
    """
    device = worker.device
    report = BenchReport(device=device["name"], arch=device["arch"], dtype=dtype, l2=l2,
                         commands=[command] if command else [], date=datetime.now(UTC).isoformat(timespec="seconds"),
                         settings=run_settings(torch_modes, input_layout, pdl))
    sms = device.get("multiprocessors") or suite.DEFAULT_SMS
    floor = worker.evaluate(empty_request(stream_timing=False))
    report.launch_floor_us = floor.timing.median_us if floor.status == "ok" and floor.timing else None
    if pdl:
        floor = worker.evaluate(empty_request(stream_timing=False, pdl=True))
        report.launch_floor_pdl_us = floor.timing.median_us if floor.status == "ok" and floor.timing else None
    key = tuned_tables.device_key(device["name"])
    tables = tables or {}
    # Every row is checked on its shape's draws (inputs and float64 reference, shared by the
    # baseline, the tuned kernel, SGLang's and the torch peers): drawn ahead on the host's other
    # cores while the GPU measures the rows before, as a tune's are (a sweep's largest silu_and_mul
    # draw takes tens of seconds on one core).
    ahead = []
    for name, shapes in kernels.items():
        folder = suite.load(name)
        for shape in shapes:
            request = _request(worker, folder, "baseline", shape, _dtype_of(folder, dtype), None, sms, input_layout, l2=l2)
            if not isinstance(request, Exclusion):
                ahead.append(request)
    draw_ahead(worker, ahead)
    if "compile" in torch_modes and builds_ahead(worker):
        _build_peers_ahead(worker, report, [(name, shape, _dtype_of(suite.load(name), dtype), "default")
                                            for name, shapes in kernels.items() for shape in shapes], progress)
    for name, shapes in kernels.items():
        folder = suite.load(name)
        kernel_dtype = _dtype_of(folder, dtype)
        table = tables.get(name)
        if table is not None:
            report.table_l2[name] = table.l2
        imported, imported_error = _imported(name)
        if imported is not None:
            origin = imported.spec.origin
            report.sglang_jit[name] = f"SGLang {origin.version}, {origin.file} ({imported.name})"
        for shape in shapes:
            label = folder.spec.label(shape)
            if progress:
                progress(f"{name} {label}")
            row = BenchRow(kernel=name, label=label, shape=shape, dtype=kernel_dtype, variant="default",
                           bytes_moved=suite.problem(folder, shape, kernel_dtype).bytes_moved,
                           measured=datetime.now(UTC).isoformat(timespec="seconds"))
            row.sglang_us = next((a.sglang_us for a in folder.spec.anchors
                                  if a.device == key and a.shape == shape and a.dtype == kernel_dtype), None)
            clock = _PartClock(row.seconds)
            baseline = _evaluate(worker, folder, "baseline", shape, kernel_dtype, None, sms, input_layout, l2=l2)
            row.baseline_us, row.baseline_spread, row.baseline_status = _time_of(baseline)
            row.floor_us, row.mix_floor_us = baseline.floor_us, baseline.mix_floor_us
            clock.done("baseline")
            copy = _same_bytes_copy(worker, row.bytes_moved, sms, l2=l2)
            row.copy_us = copy.timing.median_us if copy.status == "ok" and copy.timing else None
            if baseline.mix:
                row.mix = f"{baseline.mix[0]}:{baseline.mix[1]}"
                problem = suite.problem(folder, shape, kernel_dtype)
                row.mix_us = _same_mix(worker, problem.read_bytes, problem.write_bytes, baseline.mix, sms, l2)
            if baseline.copy_bandwidth_gbs:
                report.copy_bandwidth_gbs = baseline.copy_bandwidth_gbs
            clock.done("probes")
            source = None  # what the dispatch table runs here: "template", "baseline", or nothing
            if table is not None:
                try:
                    row.tuned_config, row.tuned_picked_by, source = table.pick(shape, sms, device["arch"])
                except suite.AstraError as exc:
                    row.tuned_status = f"excluded: {exc}"
                else:
                    tuned = _evaluate(worker, folder, source, shape, kernel_dtype, row.tuned_config or None, sms,
                                      input_layout, l2=l2, template=table.source_of(source))
                    row.tuned_us, row.tuned_spread, row.tuned_status = _time_of(tuned)
                    row.floor_us = row.floor_us or tuned.floor_us
                    row.mix_floor_us = row.mix_floor_us or tuned.mix_floor_us
                clock.done("tuned")
            if imported is not None:
                jit = (_evaluate(worker, imported, "baseline", shape, kernel_dtype, None, sms, input_layout, l2=l2)
                       if kernel_dtype in imported.spec.dtypes else
                       EvaluationResult(status="invalid", message=f"{imported.name} does not run {kernel_dtype}"))
                row.sglang_jit_us, row.sglang_jit_spread, row.sglang_jit_status = _time_of(jit)
                clock.done("sglang_jit")
            elif imported_error:
                row.sglang_jit_status = imported_error
            if pdl:
                _measure_pdl(worker, folder, row, (source, table.source_of(source)) if source else None, sms,
                             input_layout, l2)
                clock.done("pdl")
            for mode in torch_modes:
                peer: PeerResult = worker.call(measure_peer, name, shape, kernel_dtype, "default", mode, l2,
                                               timeout_s=900)  # (the worker passes arguments by position)
                report.torch_version = peer.torch_version or report.torch_version
                setattr(row, f"torch_{mode}_us", peer.median_us)
                setattr(row, f"torch_{mode}_spread", peer.timing.spread if peer.median_us else None)
                setattr(row, f"torch_{mode}_status", peer.status if peer.status == "ok" else
                        f"{peer.status}: {peer.message[:300]}")
                clock.done(f"torch_{mode}")
                if peer.compile_seconds is not None:
                    row.seconds[f"torch_{mode}_build"] = round(peer.compile_seconds, 3)
            report.rows.append(row)
            if checkpoint:
                checkpoint(report)
    return report


def builds_ahead(worker) -> bool:
    """Whether the torch.compile peers are built ahead for `worker` (peer_builds.py): on this host's
    GPU, where PyTorch is installed. A cluster's workers are other hosts, whose caches a build here
    would not fill."""
    return isinstance(worker, EvaluationWorker) and importlib.util.find_spec("torch") is not None


def _build_peers_ahead(worker, report: BenchReport, items: list, progress: Callable[[str], None] | None) -> None:
    """Build the peers of `items` ahead; the seconds go into the report. A build ahead that cannot
    start (no process can be started, say) only leaves each peer to compile as it comes."""
    if progress:
        progress(f"building the torch.compile peers of {len(items)} shape(s) ahead, in "
                 f"{min(len(items), peer_builds.processes())} processes (at most {peer_builds.DEADLINE_S:.0f} s)")
    started = time.perf_counter()
    try:
        built = peer_builds.build_ahead(items, worker.device_index)
    except Exception as exc:  # only time is lost: each peer then compiles as it comes
        line = f"torch.compile peers not built ahead ({type(exc).__name__}: {exc}); each compiles as it comes"
    else:
        line = built.line()
    report.ahead_seconds["torch_compile_build_ahead"] = round(time.perf_counter() - started, 3)
    if progress:
        progress(line)


class _PartClock:
    """Wall seconds between marks, each written into `into` under the part just done."""

    def __init__(self, into: dict[str, float]):
        self.into, self.last = into, time.perf_counter()

    def done(self, part: str) -> None:
        now = time.perf_counter()
        self.into[part] = round(now - self.last, 3)
        self.last = now


def _same_bytes_copy(worker, bytes_moved: int, sms: int, pdl: bool = False, l2: str = "cold") -> EvaluationResult:
    return worker.evaluate(copy_request(max(16, bytes_moved // 2 // 16 * 16), multiprocessors=sms,
                                        stream_timing=False, pdl=pdl, l2=l2))


def _same_mix(worker, read_bytes: int, write_bytes: int, mix: tuple[int, int], sms: int, l2: str) -> float | None:
    """The mix probe at these bytes: the faster of its launches, None if neither ran."""
    times = []
    for request in mix_requests(read_bytes, write_bytes, *mix, multiprocessors=sms, stream_timing=False, l2=l2):
        us, _, status = _time_of(worker.evaluate(request))
        times += [us] if status == "ok" else []
    return min(times) if times else None


def _measure_pdl(worker, folder, row: BenchRow, tuned: tuple[str, Template] | None, sms: int, input_layout: str,
                 l2: str = "cold") -> None:
    """The row's baseline, tuned pick and copy again, each launched as a PDL dependent, in the row's L2 regime."""
    problems = []
    baseline = _evaluate(worker, folder, "baseline", row.shape, row.dtype, None, sms, input_layout, pdl=True, l2=l2)
    row.baseline_pdl_us, _, status = _time_of(baseline)
    problems += [f"baseline {status}"] if status != "ok" else []
    if tuned is not None:
        result = _evaluate(worker, folder, tuned[0], row.shape, row.dtype, row.tuned_config or None, sms,
                           input_layout, pdl=True, l2=l2, template=tuned[1])
        row.tuned_pdl_us, _, status = _time_of(result)
        problems += [f"tuned {status}"] if status != "ok" else []
    copy = _same_bytes_copy(worker, row.bytes_moved, sms, pdl=True, l2=l2)
    row.copy_pdl_us, _, status = _time_of(copy)
    problems += [f"copy {status}"] if status != "ok" else []
    row.pdl_status = "; ".join(problems) or "ok"


def _imported(name: str) -> tuple[suite.KernelFolder | None, str]:
    """The folder `astra import-sglang` writes for `name` (sglang_<name>, SGLang's own source), when one
    is on the kernel path: timed as the bench's SGLang JIT column. One that does not load is said in
    its rows, never skipped in silence."""
    imported = f"sglang_{name}"
    if imported not in suite.names():
        return None, ""
    try:
        folder = suite.load(imported)
    except suite.AstraError as exc:
        return None, f"not loaded: {str(exc)[:300]}"
    origin = folder.spec.origin
    if origin is None or origin.port != name:
        return None, f"{imported} is not SGLang's {name} (its spec has no origin naming that port)"
    return folder, ""


def _dtype_of(folder, dtype: str) -> str:
    """The kernel's dtype in the benchmark: `dtype` where it runs in it, else its first."""
    return dtype if dtype in folder.spec.dtypes else folder.spec.dtypes[0]


def _request(worker, folder, which, shape, dtype, config, sms, input_layout, pdl: bool = False, l2: str = "cold",
             template: Template | None = None):
    return suite.request(folder, which, shape, dtype, "default", config, sms=sms, arch=worker.device["arch"],
                         source=template, stream_timing=False, input_layout=input_layout, pdl=pdl, l2=l2)


def _evaluate(worker, folder, which, shape, dtype, config, sms, input_layout, pdl: bool = False, l2: str = "cold",
              template: Template | None = None) -> EvaluationResult:
    request = _request(worker, folder, which, shape, dtype, config, sms, input_layout, pdl, l2, template)
    if isinstance(request, Exclusion):
        return EvaluationResult(status="invalid", message=f"excluded at this shape: {request.reason}")
    return worker.evaluate(request)


def _fmt(value: float | None, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if value is not None else "—"


COLUMNS = ("kernel", "shape", "baseline us", "tuned us", "speedup", "SGLang JIT us", "torch eager us", "torch.compile us",
           "best peer", "tuned vs best peer", "SGLang (kernels.md) us", "copy floor us", "mix", "mix floor us",
           "same-bytes copy us", "same-mix probe us", "tuned % of mix bw")


def table_rows(report: BenchReport) -> list[list[str]]:
    def best(r: BenchRow) -> str:
        return f"{r.best_peer[0]} {r.best_peer[1]:.2f}" if r.best_peer else "—"

    def versus(r: BenchRow) -> str:
        ratio = r.speedup_over_best_peer
        return "—" if ratio is None else f"{ratio:.3f}x" + (" (slower)" if r.slower_than_best_peer else "")

    return [[r.kernel, r.label, _fmt(r.baseline_us), _fmt(r.tuned_us), _fmt(r.speedup, 3), _fmt(r.sglang_jit_us),
             _fmt(r.torch_eager_us), _fmt(r.torch_compile_us), best(r), versus(r), _fmt(r.sglang_us), _fmt(r.floor_us),
             r.mix or "—", _fmt(r.mix_floor_us), _fmt(r.copy_us), _fmt(r.mix_us),
             f"{r.fraction_of_mix_bandwidth:.0%}" if r.fraction_of_mix_bandwidth else "—"]
            for r in report.rows]


PDL_COLUMNS = ("kernel", "shape", "baseline us", "baseline PDL us", "tuned us", "tuned PDL us", "same-bytes copy us",
               "copy PDL us", "tuned PDL / launch floor")


def pdl_table_rows(report: BenchReport) -> list[list[str]]:
    """The rows measured with --pdl, plain and PDL side by side."""
    floor = report.launch_floor_us
    return [[r.kernel, r.label, _fmt(r.baseline_us), _fmt(r.baseline_pdl_us), _fmt(r.tuned_us), _fmt(r.tuned_pdl_us),
             _fmt(r.copy_us), _fmt(r.copy_pdl_us),
             f"{r.tuned_pdl_us / floor:.2f}x" if r.tuned_pdl_us and floor else "—"]
            for r in report.rows if r.pdl_status]


def render_markdown(report: BenchReport) -> str:
    commands = "; ".join(md_code(c) for c in report.commands) or "not recorded"
    lines = [
        f"# Benchmark: {md_text(report.device)} ({md_text(report.arch)}), {md_text(report.date)}", "",
        f"Measured by {commands}. dtype {md_text(report.dtype)}; L2 {md_text(report.l2)}; copy bandwidth "
        f"{_fmt(report.copy_bandwidth_gbs, 0)} GB/s; launch floor (empty kernel, graph replay) "
        f"{_fmt(report.launch_floor_us)} us"
        + (f"; PyTorch {md_text(report.torch_version)}" if report.torch_version else "; PyTorch not installed") + ".",
        "Every time is a CUDA-graph replay median " + (
            "over rotating input sets (cold L2)" if report.l2 == "cold" else
            "over one input set left in L2 by the launch before (warm L2)")
        + ", after the checks against the float64 reference passed. Speedup is baseline over tuned; the "
        "best peer is the fastest of the SGLang baseline (the port), SGLang JIT (SGLang's own source, where "
        "`astra import-sglang` wrote it), torch eager and torch.compile at the shape (SGLang's "
        "PyTorch path); the copy floor is bytes moved over the copy bandwidth, the mix floor over the "
        "best streaming of the kernel's own read:write mix (the physical floor), and the probes stream "
        "the kernel's own bytes.", "",
        "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS),
    ]
    lines += ["| " + " | ".join(map(md_text, cells)) + " |" for cells in table_rows(report)]
    if report.sglang_jit:
        lines += ["", "SGLang JIT column: " + "; ".join(
            f"{md_text(k)}: {md_text(v)}" for k, v in report.sglang_jit.items()) + "."]
    if report.table_l2:
        lines += ["", "Tuned column: the dispatch tables were tuned with " + "; ".join(
            f"{md_text(k)}: {md_text(v)} L2" for k, v in report.table_l2.items()) + "."]
    if pdl_rows := pdl_table_rows(report):
        lines += ["", "## With programmatic dependent launch", "",
                  "Each kernel launched as a PDL dependent of the one before (tools/toolchain/pdl.py: it waits on "
                  "`griddepcontrol.wait` before touching memory), so consecutive launches overlap their "
                  "start-up but never their data. The PDL-chained empty kernel replays at "
                  f"{_fmt(report.launch_floor_pdl_us)} us; the ratio is to the plain launch floor.", "",
                  "| " + " | ".join(PDL_COLUMNS) + " |", "|" + "---|" * len(PDL_COLUMNS)]
        lines += ["| " + " | ".join(map(md_text, cells)) + " |" for cells in pdl_rows]
    lines += ["", "## Goals (issues 5 and 18), as measured", ""] + [f"- {md_text(g)}" for g in report.goals()]
    if spent := report.time_spent():
        lines += ["", md_text(spent[0].upper() + spent[1:]) + "."]
    problems = [(r, which, status) for r in report.rows
                for which, status in (("baseline", r.baseline_status), ("tuned", r.tuned_status), ("PDL", r.pdl_status),
                                      ("SGLang JIT", r.sglang_jit_status),
                                      ("torch eager", r.torch_eager_status), ("torch.compile", r.torch_compile_status))
                if status and status != "ok"]
    if problems:
        lines += ["", "## Not measured", ""] + [f"- {md_text(f'{r.kernel} {r.label} {which}: {status}')}"
                                                for r, which, status in problems]
    return "\n".join(lines) + "\n"


SWEEP_LINES = {"tuned": "tuned_us", "baseline (SGLang's, ported)": "baseline_us", "SGLang JIT": "sglang_jit_us",
               "torch.compile": "torch_compile_us", "torch eager": "torch_eager_us"}
SWEEP_MIN_POINTS = 10  # token counts a width needs for a chart: the sweep's 27, not a shape set's 5 or 6


def sweep_charts(report: BenchReport) -> dict[str, str]:
    """A chart per kernel and width (every symbol but the tokens) that the report measured at
    SWEEP_MIN_POINTS token counts or more (`--set sweep`; no shipped set has that many): time against tokens, both axes log, a
    line per peer and one for the physical floor (the copy floor where the mix was not measured).
    Keyed by file name, `sweep-<kernel>-<width>.svg`."""
    groups: dict[tuple[str, str], list[BenchRow]] = {}
    for row in report.rows:
        symbols = suite.load(row.kernel).spec.symbols if row.kernel in suite.names() else list(row.shape)
        width = "x".join(str(row.shape[s]) for s in symbols[1:])
        groups.setdefault((row.kernel, width), []).append(row)
    charts = {}
    for (kernel, width), rows in groups.items():
        token = next(iter(rows[0].shape))
        rows = sorted(rows, key=lambda r: r.shape[token])
        if len({r.shape[token] for r in rows}) < SWEEP_MIN_POINTS:
            continue
        series = {name: [(r.shape[token], getattr(r, field)) for r in rows if getattr(r, field)]
                  for name, field in SWEEP_LINES.items()}
        series["floor"] = [(r.shape[token], r.mix_floor_us or r.floor_us) for r in rows if r.mix_floor_us or r.floor_us]
        charts[f"sweep-{kernel}-{width}.svg"] = plots.line_chart(
            {name: line for name, line in series.items() if line}, log_x=True, log_y=True,
            title=f"{kernel} at {width}: time against tokens ({report.device}, {report.l2} L2)",
            ylabel="microseconds per call", xlabel=f"tokens ({token})")
    return charts


def chart(report: BenchReport) -> str:
    """Each shape's fraction of the bandwidth of its own read/write mix (the copy's where the mix
    was not measured): baseline, tuned, torch.compile."""
    labels = [f"{r.kernel.split('_')[0]} {r.label}" for r in report.rows]

    def fraction(r: BenchRow, us: float | None) -> float | None:
        floor = r.mix_floor_us or r.floor_us
        return floor / us if floor and us else None

    series = {"baseline": [fraction(r, r.baseline_us) for r in report.rows],
              "tuned": [fraction(r, r.tuned_us) for r in report.rows],
              "torch.compile": [fraction(r, r.torch_compile_us) for r in report.rows]}
    return plots.grouped_bar_chart(labels, series, title=f"Fraction of the mix bandwidth ({report.device}, {report.l2} L2)",
                                   ylabel="physical floor / time", reference=1.0)
