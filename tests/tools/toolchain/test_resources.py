from astra_kernels.tools.toolchain.resources import parse_ptx_signatures, parse_ptxas_report

LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'heavy' for 'sm_90'
ptxas info    : Function properties for heavy
ptxas         .     96 bytes stack frame, 40 bytes spill stores, 52 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 4096 bytes smem, 400 bytes cmem[0]
ptxas info    : Compile time = 20.517 ms
ptxas info    : Compiling entry function 'light' for 'sm_80'
ptxas info    : Function properties for light
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, used 0 barriers
"""


def test_report_per_entry():
    report = parse_ptxas_report(LOG)
    assert set(report) == {"heavy", "light"}
    heavy = report["heavy"]
    assert (heavy.registers, heavy.barriers, heavy.shared_bytes, heavy.constant_bytes) == (128, 1, 4096, 400)
    assert (heavy.stack_frame_bytes, heavy.spill_store_bytes, heavy.spill_load_bytes) == (96, 40, 52)
    assert heavy.spills
    light = report["light"]
    assert light.registers == 8 and light.shared_bytes == 0 and not light.spills


def test_empty_log_has_no_entries():
    assert parse_ptxas_report("") == {}


PTX = """
.visible .entry k(
	.param .u64 .ptr .global .align 1 k_param_0,
	.param .u32 k_param_1,
	.param .f32 k_param_2,
	.param .align 8 .b8 k_param_3[24]
)
{ ret; }
.visible .entry none()
{ ret; }
"""


def test_ptx_signatures():
    sigs = parse_ptx_signatures(PTX)
    assert [(p.ptx_type, p.size, p.align) for p in sigs["k"]] == [
        ("u64", 8, 8), ("u32", 4, 4), ("f32", 4, 4), ("b8", 24, 8)
    ]
    assert sigs["none"] == []
