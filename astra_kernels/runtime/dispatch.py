"""The dispatch table: tuned shapes mapped to their best configurations, and a run-time pick.

A shape that was tuned gets its own best, which is the baseline itself where no configuration
measured there beat it: so the tuned kernel is never slower than the baseline at a tuned shape. Any other shape gets the configuration of the nearest
tuned shape (nearest_first: within the token range tuned at its width, that width's nearest
token count; else by the sum over the symbols of |log a - log b|) whose configuration the
template's constraints admit at the new shape, else the general configuration, else the
configuration the shape admits that is fewest value steps from the nearest tuned shape's (at an
odd width, say, the same threads and CTAs per row with narrower vectors), so the launcher never
picks a configuration that cannot run there, nor a slow one when a near one runs. At a width no
entry was tuned at, a template that declares the work of a thread (`//@ work:`) has the nearest
configuration that keeps that work what it was where it was tuned picked first: another width's
entry, else an entry's configuration that cannot run there moved one value, the nearest width's first
(`_work_kept`).

Besides the kernel folder's template and baseline, a table may carry named sources of its own
(`sources`): the agent's result holds, at some shapes, a model's rewrite or a model's template,
and the table is then the whole result, which `astra export` builds into one file. An entry
names the source it runs, at a configuration of that source's parameters; the fallbacks past
the tuned entries (general configuration, closest runnable) stay the folder's template.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

from pydantic import BaseModel, PrivateAttr, model_validator

from astra_kernels.tools.measuring.regimes import L2Regime
from astra_kernels.tools.templating.template import Exclusion, Instance, Template, TemplateError, parse_template

from astra_kernels import suite


def nearest_first(tuned: list[dict[str, int]], shape: dict[str, int], symbols: list[str]) -> list[int]:
    """The indices of the `tuned` shapes, nearest to `shape` first, by token range: where `shape`'s
    width (every symbol but the first) was tuned at token counts on both sides of its own (or at
    it), the tuned counts of that width come first, the nearer (|log a - log b| of the token
    counts) first; every other tuned shape after them, and for any other shape every one, by the
    sum of |log a - log b| over all the symbols. Ties keep the table's order.

    A server calls a kernel at one width and every token count; summed into one distance, 40x14336
    took 32x8192's configuration from the shipped H200 table though that table holds 14336-wide
    shapes at 16 and 128 tokens (3.08 us against torch.compile's 2.62, 2026-11-28). Outside its
    width's tuned range (or at a width never tuned) the summed distance still decides, so a table
    tuned at one token count of a width does not send every token count there."""
    token, width = symbols[0], symbols[1:]
    same = {i for i, t in enumerate(tuned) if all(t[s] == shape[s] for s in width)}
    counts = [tuned[i][token] for i in same]
    inside = bool(counts) and min(counts) <= shape[token] <= max(counts)

    def key(i: int) -> tuple[int, float]:
        t = tuned[i]
        if inside and i in same:
            return 0, abs(math.log(t[token]) - math.log(shape[token]))
        return 1, sum(abs(math.log(t[s]) - math.log(shape[s])) for s in symbols)

    return sorted(range(len(tuned)), key=key)


class DispatchEntry(BaseModel):
    shape: dict[str, int]
    config: dict[str, int]
    median_us: float | None = None
    # "template", "baseline" (nothing measured there beat it) or a name among the table's sources
    source: str = "template"


FOLDER_SOURCES = ("template", "baseline")
_SOURCE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


class Pick(NamedTuple):
    """What to launch at a shape: `source` (the template, the baseline or a named source of the
    table) at `config`, its parameters' values (empty for the baseline)."""

    config: dict[str, int]
    picked_by: str
    source: str = "template"


class DispatchTable(BaseModel):
    kernel: str
    dtype: str
    variant: str
    entries: list[DispatchEntry]
    general: dict[str, int] | None = None
    sources: dict[str, str] = {}  # name -> source text: kernels of this table besides the folder's two
    l2: L2Regime = "cold"  # the L2 regime it was tuned in
    # Where and when it was tuned (the GPU as its tuning report names it, "NVIDIA H200 (sm_90)", and
    # the date, ISO 8601; a replay's: its recording's): `astra export`'s header says a table's age and
    # device from these, which a shipped table has no report beside it to tell. None: not recorded.
    tuned_on: str | None = None
    tuned_date: str | None = None
    _parsed: dict = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _sources_named(self) -> "DispatchTable":
        for name in self.sources:
            if name in FOLDER_SOURCES or not _SOURCE_NAME.fullmatch(name):
                raise ValueError(f"source name {name!r} must be a letter then letters, digits, '-' or '_', "
                                 f"and not {' or '.join(FOLDER_SOURCES)}")
        for entry in self.entries:
            if entry.source not in FOLDER_SOURCES and entry.source not in self.sources:
                raise ValueError(f"an entry runs source {entry.source!r}, which is neither "
                                 f"{' nor '.join(FOLDER_SOURCES)} nor among the table's sources "
                                 f"({', '.join(self.sources) or 'none'})")
        # One entry per shape: with two, pick() takes whichever sorts first while a reader (the
        # exported file's header) may show the other; 100k copies of one made an export run for minutes.
        counts: dict[tuple, int] = {}
        for entry in self.entries:
            key = tuple(sorted(entry.shape.items()))
            counts[key] = counts.get(key, 0) + 1
        if twice := next(((key, n) for key, n in counts.items() if n > 1), None):
            shape = dict(twice[0])
            label = "x".join(str(v) for v in next(e.shape for e in self.entries if e.shape == shape).values())
            raise ValueError(f"the table has {twice[1]} entries at {label}; a dispatch table holds one per shape")
        return self

    @model_validator(mode="after")
    def _read_as_the_template_does(self) -> "DispatchTable":
        """A table tuned before the folder's template gained a parameter runs the code it was tuned
        with: each template entry and the general configuration take a parameter they lack at its
        default (Template.filled), so pick(), the export and the benchmark's comparisons see one
        spelling. A kernel not on the path here is left as written (pick() names it when used)."""
        try:
            template = suite.load(self.kernel).template
        except suite.AstraError:
            return self
        for entry in self.entries:
            if entry.source == "template":
                entry.config = template.filled(entry.config)
        if self.general is not None:
            self.general = template.filled(self.general)
        return self

    def broken_entry(self, sms: int = suite.DEFAULT_SMS, arch: str | None = None,
                     device_facts: bool = True) -> str | None:
        """The first entry whose configuration the template's constraints refuse at the entry's own
        shape, on a GPU of `sms` multiprocessors and `arch`, as a sentence naming the shape, the
        parameters and the constraint; None when every entry runs where it was tuned.

        pick() passes over such an entry silently to the next nearest one, so a table holding one
        (hand-edited, or from another template) runs another configuration than the one it shows.
        With `device_facts` False, constraints on the GPU (SM, SMS) are left out: on another GPU
        than the tuner's, falling back is what pick() is for. Entries that do not set the source's
        parameters or the kernel's symbols are left to the caller's checks (export's check_table)."""
        from astra_kernels.tools.toolchain.targets import DEFAULT_ARCH

        folder = suite.load(self.kernel)
        spec = folder.spec
        for entry in self.entries:
            if entry.source == "baseline" or set(entry.shape) != set(spec.symbols):
                continue
            template = self.source_of(entry.source)
            if set(entry.config) != set(template.names):
                continue
            env = suite.environment(spec, entry.shape, self.dtype, self.variant, sms, arch)
            instance = template.instantiate(entry.config, env)
            if not isinstance(instance, Exclusion):
                continue
            constraint = next((c for c in template.constraints if c.line == instance.line), None)
            on_device = constraint is not None and bool(constraint.expression.names & {"SM", "SMS"})
            if on_device and not device_facts:
                continue
            named = [n for n in template.names if constraint is not None and n in constraint.expression.names]
            values = ", ".join(f"{n}={entry.config[n]}" for n in named or template.names)
            rule = (f"constraint `{constraint.expression.text}` ({constraint.reason}; {template.path} line "
                    f"{constraint.line})" if constraint else f"launch geometry ({instance.reason})")
            where = f" on {arch or DEFAULT_ARCH} with {sms} SMs" if on_device else ""
            return (f"{self.kernel} entry {spec.label(entry.shape)}: {values} break{'s' if len(named) == 1 else ''} "
                    f"the {entry.source}'s {rule}{where}, so the table would run another configuration there "
                    f"than the one it names")
        return None

    def onto(self, base: "DispatchTable") -> tuple["DispatchTable", int]:
        """This table's entries over `base`'s: `base`'s entries in their order, each replaced by this
        table's where it has one at that shape (so a shape neither tuned here nor near a new one is
        picked as before: pick() breaks ties by the table's order), then this table's at new shapes;
        `base`'s entries keep the named sources they run, and a template entry reads as the
        template now does (a parameter gained since at its default: the code it ran; one whose
        value the template no longer offers is dropped). `base`'s general configuration, chosen
        over all its shapes, else this table's. The table, and how many of `base`'s entries it kept.

        How a tune of a few shapes (a model's width, token counts tuned again with a larger budget)
        extends or mends a shipped table rather than replacing it, which would leave every other
        shape to the nearest of the few. Both must be tables of one kernel, dtype, variant and L2
        regime (a pick timed warm among picks timed cold is a table of neither regime), and of one
        GPU kind, which the caller checks before any GPU work (astra tune). The table's date is
        the older of the two where it keeps entries of `base`: its age is that of its oldest picks."""
        mine, theirs = (self.kernel, self.dtype, self.variant, self.l2), (base.kernel, base.dtype, base.variant, base.l2)
        if mine != theirs:
            raise suite.AstraError(f"a table of {base.kernel} in {base.dtype} ({base.variant}) tuned with {base.l2} L2 "
                                   f"cannot take entries of {self.kernel} in {self.dtype} ({self.variant}) tuned with "
                                   f"{self.l2} L2")
        template = suite.load(self.kernel).template
        new = {tuple(sorted(e.shape.items())): e for e in self.entries}
        entries, kept, theirs_run = [], 0, set()
        for entry in base.entries:
            if (replaced := new.pop(tuple(sorted(entry.shape.items())), None)) is not None:
                entries.append(replaced)
            elif entry.source != "template":
                entries.append(entry)
                kept += 1
                theirs_run.add(entry.source)
            elif (config := template.point(entry.config)) is not None:
                entries.append(entry.model_copy(update={"config": config}))
                kept += 1
        entries += new.values()
        sources = {n: text for n, text in base.sources.items() if n in theirs_run}
        for name, text in sources.items():
            if self.sources.get(name, text) != text:
                raise suite.AstraError(f"both tables name a source {name!r}, with different code: rename one "
                                       "before putting one table onto the other")
        dates = [d for d in (self.tuned_date, base.tuned_date if kept else None) if d]
        table = DispatchTable(kernel=self.kernel, dtype=self.dtype, variant=self.variant, l2=self.l2,
                              general=(base.general and template.point(base.general)) or self.general,
                              sources={**sources, **self.sources},
                              entries=entries, tuned_on=self.tuned_on or base.tuned_on,
                              tuned_date=min(dates) if dates else None)
        return table, kept

    def source_names(self) -> list[str]:
        """Every source the table can launch, in a fixed order: the folder's template and baseline, then its own."""
        return [*FOLDER_SOURCES, *self.sources]

    def source_of(self, name: str) -> Template:
        """The parsed source `name`; a named source that does not parse is a TemplateError naming it."""
        if name in FOLDER_SOURCES:
            return suite.load(self.kernel).source_of(name)
        if name not in self._parsed:
            if name not in self.sources:
                raise suite.AstraError(f"{self.kernel}: the table has no source {name!r}")
            symbols = suite.template_symbols(suite.load(self.kernel).spec)
            try:
                self._parsed[name] = parse_template(self.sources[name], f"{name}.cu", symbols)
            except TemplateError as exc:
                raise TemplateError(f"the table's source {name}: {exc}") from None
        return self._parsed[name]

    def _work_kept(self, ranked: list[DispatchEntry], shape: dict[str, int], sms: int, arch: str | None) -> Pick | None:
        """At a width no entry was tuned at, where the nearest entry's configuration would make a
        thread do other work here than where it was tuned (its template's `work:`, say two passes
        over a row's slice instead of one) or cannot run here: the configuration of the next
        nearest width's nearest entry whose work stays what it was where it was tuned, else, width
        by width in the same order, each width's nearest entry's configuration (of the folder's
        template: the export's C++ holds the values of its parameters only) that cannot run here
        as it is, with one parameter the launch geometry does not read moved one value, where that
        runs here with the work a thread did where it was tuned (a measured configuration before a
        variant of one; the row's bounds kept where it was compiled in exactly, say). None where the
        nearest entry's work stays, it is the baseline's, its source declares no work (for a move:
        the folder's template declares none), or neither kind keeps it: the ordinary nearest pick
        then.

        A configuration is tuned for a width's division of a row: carried to a width it divides
        worse it is no longer what won there. The H200 table's pick at 1x18944 (Qwen2-7B's
        width) was 1x14336's 64 threads x 32 chunks, one pass over a 448-element chunk there, two
        over 592 here with 10 of 64 threads busy in the second: 2.9-3.2 us against torch.compile's
        1.8-2.1 (2026-11-28); 1x28672's 128 threads x 32 chunks keeps one pass. The norms' entries
        at 4096 mostly compile the row in exactly (STATIC_ROW 2: 512 vectors a row), which 3584
        refuses; the next entry that ran was 128x11008's 1024 threads x 2-element vectors, 0.67-0.97x
        of the fastest peer up to 202 tokens (fused_add_rmsnorm), where STATIC_ROW 1 (the same
        launch, the row's bounds kept) is 1.09-1.29x. A move that changes the launch does not keep
        what won: 4096's 256 threads x 2 vectors moved to 512 threads at 5120 (a second round with a
        quarter of them busy) measured 0.79-0.87x of the fastest peer against the ordinary pick's
        0.96-1.03x at 3450-16384 tokens. The variants of every width, not only the nearest: at
        5120 (a width no table is tuned at) the few-token entries at 4096 and 8192 both compile the
        row in exactly, 4096's a pass too few for 5120, so the next width that kept its work was
        none and the pick fell to 128x11008's 1024 threads x 2-element vectors, three passes over
        the row where it did six; 8192's own configuration with the row's bounds kept (STATIC_ROW
        1) keeps its one pass. Only a configuration that cannot run here is moved: one that runs
        with other work would only have it counted anew (a first form moved any: at 5120,
        rmsnorm's 128x11008 entry of 512 threads x 8-element vectors, which runs there, moved to
        4-element ones keeps three vectors a thread, each half the bytes; on an H200, cold,
        0.90-0.97x of the fastest peer at 1022-7762 tokens where the entry as tuned ran
        1.00-1.04x)."""
        spec = suite.load(self.kernel).spec
        width = spec.symbols[1:]
        if not ranked or any(all(e.shape[s] == shape[s] for s in width) for e in ranked):
            return None

        def run(source: str, config: dict[str, int], at: dict[str, int]) -> Instance | None:
            """`config` made concrete at shape `at`; None where it cannot run there."""
            instance = self.source_of(source).instantiate(
                config, suite.environment(spec, at, self.dtype, self.variant, sms, arch))
            return None if isinstance(instance, Exclusion) else instance

        def keeps(source: str, config: dict[str, int], tuned_at: dict[str, int]) -> int | None:
            """The work per thread of `config` here where it is the work it did at `tuned_at`, else None."""
            here = run(source, config, shape)
            there = None if here is None else run(source, config, tuned_at)
            return here.work if there is not None and here.work == there.work else None

        first = ranked[0]
        if first.source == "baseline" or self.source_of(first.source).work is None:
            return None
        if keeps(first.source, first.config, first.shape) is not None:
            return None
        nearest = [first]  # each width's nearest entry, the nearest width first
        widths = {tuple(first.shape[s] for s in width)}
        for entry in ranked[1:]:
            key = tuple(entry.shape[s] for s in width)
            if key in widths:
                continue  # a width's nearest entry stands for it
            widths.add(key)
            nearest.append(entry)
            if entry.source == "baseline" or self.source_of(entry.source).work is None:
                continue
            if (kept := keeps(entry.source, entry.config, entry.shape)) is not None:
                named = "" if entry.source == "template" else f": {entry.source}"
                return Pick(entry.config, f"work per thread kept ({kept}): tuned shape {spec.label(entry.shape)}'s "
                                          f"configuration{named}", entry.source)
        template = self.source_of("template")
        if template.work is None:
            return None
        launch = template.launch_parameters()
        for entry in nearest:
            # the export's C++ knows the folder template's values only
            tuned = run("template", entry.config, entry.shape) if entry.source == "template" else None
            if tuned is None or run("template", entry.config, shape) is not None:
                continue  # it runs here as it is, with other work: a move would only count that work anew
            for parameter in template.parameters:
                if parameter.name in launch or entry.config[parameter.name] not in parameter.values:
                    continue
                at = parameter.values.index(entry.config[parameter.name])
                for step in (at - 1, at + 1):
                    if 0 <= step < len(parameter.values):
                        moved = {**entry.config, parameter.name: parameter.values[step]}
                        here = run("template", moved, shape)
                        if here is not None and here.work == tuned.work:
                            return Pick(moved, f"work per thread kept ({tuned.work}): tuned shape "
                                               f"{spec.label(entry.shape)}'s configuration with "
                                               f"{parameter.name}={parameter.values[step]}")
        return None

    def pick(self, shape: dict[str, int], sms: int = suite.DEFAULT_SMS, arch: str | None = None) -> Pick:
        """The configuration to launch at `shape` on a GPU of `sms` multiprocessors and `arch`, and
        where it came from."""
        folder = suite.load(self.kernel)
        env = suite.environment(folder.spec, shape, self.dtype, self.variant, sms, arch)

        def admits(config, source: str = "template") -> bool:
            return not isinstance(self.source_of(source).instantiate(config, env), Exclusion)

        ranked = [self.entries[i] for i in nearest_first([e.shape for e in self.entries], shape, folder.spec.symbols)]
        if kept := self._work_kept(ranked, shape, sms, arch):
            return kept
        for entry in ranked:
            tuned = all(entry.shape[s] == shape[s] for s in folder.spec.symbols)
            where = "tuned" if tuned else f"nearest tuned shape {folder.spec.label(entry.shape)}"
            if entry.source == "baseline":  # the baseline runs at every shape
                return Pick({}, f"{where}: the baseline", "baseline")
            if admits(entry.config, entry.source):
                named = "" if entry.source == "template" else f": {entry.source}"
                return Pick(entry.config, where + named, entry.source)
        if self.general and admits(self.general):
            return Pick(self.general, "general configuration")
        templated = [e for e in ranked if e.source == "template"]
        target, origin = ((templated[0].config, f"tuned shape {folder.spec.label(templated[0].shape)}") if templated
                          else (folder.template.default, "template default"))
        index = {p.name: {v: i for i, v in enumerate(p.values)} for p in folder.template.parameters}

        def steps(config) -> int:
            return sum(abs(index[n][config[n]] - index[n][target[n]]) for n in index if n in target)

        # the nearest first (sorted is stable: among equals, the space's own order), so only the
        # configurations nearer than the answer are instantiated, not the whole space
        closest = next((c for c in sorted(folder.template.all_configs(), key=steps) if admits(c)), None)
        if closest is not None:
            return Pick(closest, f"closest runnable to the {origin}'s configuration")
        raise suite.AstraError(f"{self.kernel}: no configuration of the template runs at {folder.spec.label(shape)}")
