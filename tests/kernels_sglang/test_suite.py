"""Every kernel of the suite, without a GPU: specs, geometry at every shape, and CI's compile of
every baseline binary and a seeded sample of 200 template configurations for sm_90 and sm_80 (each
configuration at up to three of the binaries its shapes derive: its first, middle and last)."""

from __future__ import annotations

import pytest

from astra_kernels import suite
from astra_kernels.tools.toolchain.compiler import compile_many
from astra_kernels.tools.templating.template import Exclusion

KERNELS = suite.names()


def test_suite_is_listed():
    assert "silu_and_mul" in KERNELS


def test_unknown_kernel_is_a_clear_error():
    with pytest.raises(suite.UnknownKernelError, match="silu_and_mul"):
        suite.load("silu_and_mull")


def test_a_row_stride_names_an_integer_scalar_whose_value_is_the_contiguous_stride():
    """ArgSpec.row_stride: a tensor of two or more dimensions, its carrier an integer scalar whose value
    is the product of the tensor's other sizes (what the suite's contiguous runs pass)."""
    from astra_kernels.suite.schema import KernelSpec

    spec = suite.load("rotary_embedding").spec.model_dump()

    def with_args(**changes):
        args = [dict(a, **changes.get(a["name"], {})) for a in spec["args"]]
        return KernelSpec.model_validate({**spec, "args": args})

    assert with_args().args[1].row_stride == "q_stride"
    for changes, message in [
        ({"q_stride": {"value": "HQ * R"}}, "q_stride = HQ \\* R is not q's contiguous row stride"),
        ({"q": {"row_stride": "eps"}}, "q's row_stride 'eps' must name an integer scalar argument"),
        ({"q": {"row_stride": "k"}}, "q's row_stride 'k' must name an integer scalar argument"),
        ({"positions": {"row_stride": "q_stride"}}, "row_stride on positions: only a tensor of two or more"),
    ]:
        with pytest.raises(ValueError, match=message):
            with_args(**changes)


@pytest.mark.parametrize("name", KERNELS)
def test_baseline_runs_at_every_shape_dtype_and_variant(name):
    folder = suite.load(name)
    spec = folder.spec
    for shape in spec.all_shapes():
        for dtype in spec.dtypes:
            for variant in spec.variants:
                req = suite.request(folder, "baseline", shape, dtype, variant)
                assert not isinstance(req, Exclusion), f"{name} baseline excluded at {shape}: {req}"
                assert req.problem.bytes_moved > 0
                threads = req.launch.threads
                assert 1 <= threads <= 1024, f"{name} {shape}: {threads} threads"


@pytest.mark.parametrize("name", KERNELS)
def test_default_template_runs_at_every_astra_and_serving_shape(name):
    folder = suite.load(name)
    spec = folder.spec
    dtype = "bf16" if "bf16" in spec.dtypes else spec.dtypes[0]
    for set_name in ("astra", "serving"):
        for shape in spec.shapes.get(set_name, []):
            req = suite.request(folder, "template", shape, dtype)
            assert not isinstance(req, Exclusion), f"{name} default excluded at {shape}: {req}"


SAMPLES = {"sm_90": 200, "sm_80": 50}  # template configurations compiled per kernel


@pytest.mark.slow
@pytest.mark.parametrize("arch", list(SAMPLES))
@pytest.mark.parametrize("which", ["baseline", "template"])
@pytest.mark.parametrize("name", KERNELS)
def test_every_binary_compiles(name, which, arch, record_property):
    """Every baseline binary, and a sample of template configurations: 200 for sm_90 (the GPUs the
    tables are tuned on), 50 for sm_80, whose binaries differ from sm_90's only where the source
    asks for the architecture (150 more configurations cost CI about two minutes)."""
    folder = suite.load(name)
    sample = SAMPLES[arch]
    targets, exclusions = suite.compile_targets(folder, which, arch, sample=sample, per_config=3)
    source = folder.source_of(which).source
    outcomes = compile_many([(source, t.options) for t in targets])
    failures = [(t, o.error) for t, o in zip(targets, outcomes) if o.module is None]
    assert not failures, f"{len(failures)} of {len(targets)} failed; first: {failures[0][0]}\n{failures[0][1]}"
    if which == "template":
        configs = {t.config for t in targets}
        assert len(configs) >= min(sample, folder.template.size() - len(exclusions)), len(configs)
    kernel = folder.source_of(which).kernel
    resources = [o.module.kernel(kernel).resources for o in outcomes]
    record_property("binaries", len(resources))
    record_property("max_registers", max(r.registers for r in resources))
    record_property("spilling", sum(r.spills for r in resources))
    if which == "baseline":
        assert not any(r.spills for r in resources), f"{name} baseline spills"


def test_a_bounded_sample_keeps_every_configuration_at_its_first_and_last_binary():
    """per_config trims binaries, never configurations: topk_softmax's 200 configurations stay 200,
    each at most three binaries, its first and last among them."""
    from collections import defaultdict

    folder = suite.load("topk_softmax")
    full, _ = suite.compile_targets(folder, "template", "sm_90", sample=200)
    bounded, _ = suite.compile_targets(folder, "template", "sm_90", sample=200, per_config=3)
    by_config, kept = defaultdict(list), defaultdict(list)
    for t in full:
        by_config[t.config].append(t.options)
    for t in bounded:
        kept[t.config].append(t.options)
    assert set(kept) == set(by_config) and len(kept) == 200 and len(bounded) < len(full)
    for config, options in kept.items():
        assert len(options) <= 3
        if len(by_config[config]) == len(options):
            continue
        assert options[0] == by_config[config][0] and options[-1] == by_config[config][-1], config
