"""The words and small programs beside an exported kernel: its Python launcher and its SGLang guide.

An export is only useful once it is in a server, and the way in differs per kernel: which
sgl_kernel function it replaces, with what signature, called from which SGLang layer. That
knowledge lives here, one entry per kernel, so `astra export` writes a guide whose code matches
the exported signature; the names are sgl_kernel's and SGLang's own (sgl-kernel/python/sgl_kernel/
elementwise.py and attention.py; python/sglang/srt/layers/layernorm.py, activation.py and
attention/merge_state.py). Kernels without an entry get the generic part of the guide.
"""

from __future__ import annotations

from dataclasses import dataclass

from astra_kernels import suite
from astra_kernels.jobs.generated_files import fill, md_code, md_text
from astra_kernels.runtime.export_format import Group, caller_scalars, op_name, row_strides, shape_args, shape_params
from .torch_op import schema


@dataclass(frozen=True)
class SwapIn:
    """How one sgl_kernel op gives way to the exported kernel."""

    op: str  # the sgl_kernel attribute replaced
    signature: str  # sgl_kernel's signature and what it returns
    call_site: str  # where SGLang calls it
    wrapper: str  # a drop-in with sgl_kernel's signature; `_tuned` is the exported callable, `_original` the op


_SILU_WRAPPER = '''def {op}(input, out=None):
    if input.dtype != {torch_dtype} or not input.is_contiguous():
        return _original(input, out)
    if out is None:
        out = torch.empty(input.shape[:-1] + (input.shape[-1] // 2,), dtype=input.dtype, device=input.device)
    _tuned(input.view(-1, input.shape[-1]), out.view(-1, out.shape[-1]))
    return out'''

SWAPS = {
    "rmsnorm": SwapIn(
        op="rmsnorm",
        signature="sgl_kernel.rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None) -> out",
        call_site="python/sglang/srt/layers/layernorm.py, RMSNorm.forward_cuda: "
                  "`out = rmsnorm(x, self.weight.data, self.variance_epsilon)`",
        wrapper='''def rmsnorm(input, weight, eps=1e-6, out=None, enable_pdl=None):
    if input.dtype != {torch_dtype} or input.dim() != 2 or not input.is_contiguous():
        return _original(input, weight, eps, out, enable_pdl)
    if out is None:
        out = torch.empty_like(input)
    _tuned(input, weight, out, eps=eps)
    return out'''),
    "fused_add_rmsnorm": SwapIn(
        op="fused_add_rmsnorm",
        signature="sgl_kernel.fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None) -> None "
                  "(in place: residual += input, then input = rmsnorm(residual) * weight)",
        call_site="python/sglang/srt/layers/layernorm.py, RMSNorm.forward_cuda: "
                  "`fused_add_rmsnorm(x, residual, self.weight.data, self.variance_epsilon)`",
        wrapper='''def fused_add_rmsnorm(input, residual, weight, eps=1e-6, enable_pdl=None):
    if input.dtype != {torch_dtype} or input.dim() != 2 or not (input.is_contiguous() and residual.is_contiguous()):
        return _original(input, residual, weight, eps, enable_pdl)
    _tuned(input, residual, weight, eps=eps)'''),
    "merge_attn_states": SwapIn(
        op="merge_state_v2",
        signature="sgl_kernel.merge_state_v2(v_a, s_a, v_b, s_b, v_merged=None, s_merged=None) -> (v_merged, s_merged); "
                  "v [tokens, heads, head_dim], s [tokens, heads] float32",
        call_site="python/sglang/srt/layers/attention/merge_state.py, merge_state(): "
                  "`from sgl_kernel import merge_state_v2` inside the function, so the patched attribute is read "
                  "at every call",
        wrapper='''def merge_state_v2(v_a, s_a, v_b, s_b, v_merged=None, s_merged=None):
    if v_a.dtype != {torch_dtype}:
        return _original(v_a, s_a, v_b, s_b, v_merged, s_merged)
    s_a, s_b = s_a.to(torch.float32).contiguous(), s_b.to(torch.float32).contiguous()
    v_merged = torch.empty_like(v_a) if v_merged is None else v_merged
    s_merged = torch.empty_like(s_a) if s_merged is None else s_merged
    _tuned(v_a.contiguous(), s_a, v_b.contiguous(), s_b, v_merged, s_merged)
    return v_merged, s_merged'''),
}
_ROPE_WRAPPER = '''def apply_rope_with_cos_sin_cache_inplace(positions, query, key, head_size, cos_sin_cache, is_neox=True,
                                          *args, **kwargs):
    tokens = positions.numel()
    if tokens == 0:  # an idle batch: nothing to rotate (and no row width to read from empty tensors)
        return
    # q and k as SGLang passes them, views into the QKV output: rows apart, each row contiguous
    if (query.dtype != {torch_dtype} or key.dtype != query.dtype or bool(is_neox) != {is_neox} or args or kwargs
            or positions.dtype != torch.int64 or cos_sin_cache.dtype != torch.float32
            or not (query[0].is_contiguous() and key[0].is_contiguous() and cos_sin_cache.is_contiguous())):
        return _original(positions, query, key, head_size, cos_sin_cache, is_neox, *args, **kwargs)
    q, k = query.view(tokens, -1), key.view(tokens, -1)
    rows_misaligned = tokens > 1 and any(t.stride(0) != t.shape[1] and t.stride(0) * t.element_size() % 16
                                         for t in (q, k))
    if q.data_ptr() % 16 or k.data_ptr() % 16 or rows_misaligned:
        return _original(positions, query, key, head_size, cos_sin_cache, is_neox, *args, **kwargs)
    _tuned(positions.view(-1), q, k, cos_sin_cache, num_q_heads=q.shape[1] // head_size,
           num_k_heads=k.shape[1] // head_size, head_dim=head_size)'''
_ACTIVATIONS = {"default": ("silu_and_mul", "SiluAndMul"), "gelu": ("gelu_and_mul", "GeluAndMul"),
                "gelu_tanh": ("gelu_tanh_and_mul", "GeluAndMul (approximate='tanh')")}
_TORCH_DTYPES = {"bf16": "torch.bfloat16", "fp16": "torch.float16", "fp32": "torch.float32"}


def swap_in(kernel: str, variant: str) -> SwapIn | None:
    if kernel == "silu_and_mul":
        op, layer = _ACTIVATIONS.get(variant, _ACTIVATIONS["default"])
        return SwapIn(op=op, signature=f"sgl_kernel.{op}(input, out=None) -> out",
                      call_site=f"python/sglang/srt/layers/activation.py, {layer}.forward_cuda: `{op}(x, out)`",
                      wrapper=_SILU_WRAPPER.replace("{op}", op))
    if kernel == "rotary_embedding":
        neox = variant != "interleaved"
        return SwapIn(op="apply_rope_with_cos_sin_cache_inplace",
                      signature="sgl_kernel.apply_rope_with_cos_sin_cache_inplace(positions, query, key, head_size, "
                                f"cos_sin_cache, is_neox={neox}) -> None (query and key rotated in place); "
                                "query [tokens, heads * head_size], cos_sin_cache [max_position, rotary_dim] float32",
                      call_site="python/sglang/srt/layers/rotary_embedding.py, RotaryEmbedding.forward_cuda: "
                                "`apply_rope_with_cos_sin_cache_inplace(positions=positions, query=query, key=key, "
                                "head_size=self.head_size, cos_sin_cache=self.cos_sin_cache, "
                                "is_neox=self.is_neox_style)`",
                      wrapper=_ROPE_WRAPPER.replace("{is_neox}", str(neox)))
    return SWAPS.get(kernel)




def call_example(folder: suite.KernelFolder) -> str:
    spec = folder.spec
    tensors = [a.name for a in spec.args if a.role != "scalar"]
    return ", ".join(tensors + [f"{a.name}={a.value}" for a in caller_scalars(spec)])


def torch_op_guide(k: str, folder: suite.KernelFolder, dtype: str) -> list[str]:
    """The export as the PyTorch op its `<kernel>_torch.cpp` registers (runtime/torch_op.py): what a
    serving engine should call (a native op's host cost, one node under torch.compile, captured by
    CUDA graphs), for every kernel, SGLang's or one of your own."""
    tensors = [a.name for a in folder.spec.args if a.role != "scalar"]
    call = ", ".join(tensors + [str(a.value) for a in caller_scalars(folder.spec)])
    return [
        "## Call it as a PyTorch op (the serving path)",
        "",
        "```python",
        "from astra_kernels.runtime.torch_op import load",
        f"{k} = load('/path/to/this/export/folder')  # torch.ops.astra.{op_name(k, dtype)}, built with nvcc on first use",
        f"{k}({call})",
        "```",
        "",
        f"`{k}_torch.cpp` registers the kernels with PyTorch's dispatcher: {md_code(schema(folder, dtype))}. A call "
        "costs about what a native op's does (the Python callable above: 10-16 times that on an H100, "
        "astra-kernels' docs/export.md), torch.compile traces it "
        "as one node (`fullgraph=True` holds), CUDA graphs capture it, and a bad tensor is a one-line error naming "
        "it. The first `load` builds it with nvcc (ASTRA_NVCC, the PATH or CUDA_HOME) against the installed "
        "PyTorch, then the cache serves it.",
    ]


def launcher_py(kernel: str, folder: suite.KernelFolder, dtype: str = "") -> str:
    return fill("export_launch.py.in", kernel=kernel, call=call_example(folder), dtype=dtype or "in the table's dtype")


def readme(manifest: dict, folder: suite.KernelFolder, groups: list[Group]) -> str:
    k, dtype, arch = manifest["kernel"], manifest["dtype"], manifest["arch"]
    spec = folder.spec
    carriers = shape_args(spec)
    own = set(shape_params(spec))  # symbols the launch takes as arguments of their own
    strides = row_strides(spec)  # scalar -> the tensor whose row stride the kernel takes
    signature = ", ".join(
        f"{a.name}{'' if a.role == 'scalar' else ' [' + ', '.join(a.shape) + ']'}"
        f" ({a.role}, {dtype if a.dtype == 'T' else a.dtype})" for a in spec.args)
    base = f"-arch={arch} -std=c++17"
    if len(groups) == 1:
        build = f"nvcc {' '.join([base, *groups[0].nvcc_flags()])} -shared -Xcompiler -fPIC {k}.cu -o lib{k}.so"
    else:
        build = "\n".join(
            [f"nvcc {' '.join([base, *g.nvcc_flags(), f'-DASTRA_GROUP={i}'])} -Xcompiler -fPIC -c {k}.cu -o {k}_g{i}.o"
             for i, g in enumerate(groups)]
            + [f"nvcc -shared {' '.join(f'{k}_g{i}.o' for i in range(len(groups)))} -o lib{k}.so"])
    l2 = manifest["table"].get("l2", "cold")  # tables written before the regimes were all cold
    lines = [
        f"# {k}, exported",
        "",
        f"Tuned on {md_text(manifest['tuned_on'])} ({md_text(manifest['tuned_date'])}) with {md_text(l2)} L2; "
        f"table {md_text(manifest['source_table'])} "
        f"({md_text(dtype)}, variant {md_text(manifest['variant'])}); exported {md_text(manifest['exported'])} "
        f"by {md_code(manifest['command'])}.",
        "",
        _regime_note(l2),
        "",
        "| file | what |",
        "|---|---|",
        f"| `{k}.cu` | every kernel the dispatch table can launch ({len(manifest['binaries'])}), the shared header inlined, "
        f"and the host pick and launch (`{k}_launch`, `{k}_pick`, `{k}_last_error`); builds with nvcc alone |",
        f"| `{k}.h` | the C declarations of those three functions and of `{k}_plan`, for the rest of a program |",
        f"| `{k}_launch.py` | `{k}(...)`: the same kernels as a Python callable on framework tensors (needs astra-kernels) |",
        "| `export.json` | what the file holds, per kernel: configuration, derived defines, flags, the shapes it serves |",
        "| `dispatch.json` | the dispatch table exported |",
        "",
        f"Arguments, in order: {signature}. "
        f"The shape ({', '.join(f'{s}: an argument of its own, after the others' if s in own else f'{s} = {a}' for s, a in carriers.items())}) "
        "is read from the scalars in C, and in Python from the tensors' sizes (a size they hold only as a "
        "product, from its scalar). Tensors must be contiguous and 16-byte aligned"
        + (f" ({' and '.join(sorted(set(strides.values())))} may have their rows apart, each row contiguous and the "
           f"stride a multiple of 16 bytes, where the table runs only this folder's template and baseline: "
           f"{' and '.join(strides)} carry the strides, in elements)" if strides else "") + ".",
        "",
        "## Build it",
        "",
        "```",
        build,
        "```",
        "",
        f"The file's header lists the kernels, the table and the covered shapes; at a shape whose pick the "
        f"file lacks, {k}_launch runs the file's nearest kernel that runs there (its `picked_by` says so) "
        "and returns `cudaErrorNotSupported` (saying which shape) where none does; `astra export ... --shapes` "
        "adds shapes, so their picks themselves run.",
        "",
        "## Call it from Python",
        "",
        "```python",
        f"from {k}_launch import {k}      # with this folder on sys.path",
        f"{k}({call_example(folder)})",
        "```",
        "",
        "It checks dtype, shape, contiguity, alignment and device, and launches on the tensor's current torch "
        "stream, so it runs inside CUDA-graph capture (the kernels load on the first call: make it before "
        "capturing, as SGLang's warm-up runs do).",
        "",
        *torch_op_guide(k, folder, dtype),
    ]
    swap = swap_in(k, manifest["variant"])
    if swap:
        wrapper = swap.wrapper.replace("{torch_dtype}", _TORCH_DTYPES.get(dtype, dtype))
        lines += [
            "",
            "## Swap it into an SGLang deployment",
            "",
            f"SGLang calls `{swap.signature}`",
            f"from {swap.call_site}. Patch the `sgl_kernel` attribute before SGLang imports it, in every "
            "process SGLang starts (its schedulers and tensor-parallel workers are separate processes): a "
            "`sitecustomize.py` on `PYTHONPATH` does that. Shapes, dtypes and layouts the export does not "
            "cover fall back to the original op.",
            "",
            "```python",
            "# sitecustomize.py, in a folder on PYTHONPATH: Python imports it at start-up in every process",
            "import torch",
            "import sgl_kernel",
            "",
            "from astra_kernels.runtime.torch_op import load",
            "",
            f"_tuned = load('/path/to/this/export/folder')  # torch.ops.astra.{op_name(k, dtype)}",
            "",
            f"_original = sgl_kernel.{swap.op}",
            "",
            "",
            wrapper,
            "",
            "",
            f"sgl_kernel.{swap.op} = {swap.op}",
            "```",
            "",
            f"Then start the server as usual, e.g. `PYTHONPATH=/path/to/patch python -m sglang.launch_server "
            f"--model-path ...`. To check that it is in use, call `sgl_kernel.{swap.op}` once in that "
            f"environment and compare with `_original` on the same tensors. `_tuned` is the registered op, so "
            "under `--enable-torch-compile` it is one node of the compiled graph and CUDA graphs capture it; "
            f"where nvcc cannot build it, `from {k}_launch import {k} as _tuned` (with this folder on "
            "`sys.path`) takes its place at a Python call's host cost.",
            "",
            f"Without Python in the loop, `lib{k}.so` from the build above is a C library (`{k}.h` declares it): "
            f"call `{k}_launch(<device pointers and scalars as above>, stream)` with "
            "`at::cuda::getCurrentCUDAStream()` from your own torch extension, or through ctypes.",
        ]
    lines += ["", "docs/export.md in the astra-kernels repository has the whole guide."]
    return "\n".join(lines) + "\n"


def _regime_note(l2: str) -> str:
    """Which L2 regime the table's picks are for, and when the other table fits better."""
    if l2 == "warm":
        return ("Its configurations were timed with the inputs resident in L2, as when the op before has just "
                "written them (decode, where a step's activations fit in L2); where the inputs come from memory, "
                "the table tuned with cold L2 (`astra export` without `--l2 warm`) fits better.")
    return ("Its configurations were timed with the inputs streamed from memory (cold L2); where the op before "
            "has just written the inputs and they fit in L2, a table tuned with warm L2 (`astra export --l2 warm`, "
            "where one is shipped) fits better.")
