"""A folder from `astra new --from tests/support/cuda/scale_add.cu`, filled in as a user would: the
reference, alpha's value, real shapes, the launch, and a template with one parameter (threads per CTA)."""

from __future__ import annotations

from pathlib import Path

from astra_kernels import cli
from astra_kernels.jobs import new_kernel

SOURCE = Path(__file__).parent / "cuda" / "scale_add.cu"
SHAPES = [{"N": 4096}, {"N": 1 << 20}]


def made(dest: Path) -> Path:
    assert cli.main(["new", "scale_add", "--from", str(SOURCE), "--dir", str(dest)]) == 0
    return dest / "scale_add"


def filled(dest: Path) -> Path:
    folder = made(dest)
    spec = (folder / "spec.py").read_text()
    spec = spec.replace('"what scale_add computes, in one line"', '"out = x * alpha + y"')
    spec = spec.replace('value="1"', 'value="0.5"').replace('[{"N": 4096}]', repr(SHAPES))
    (folder / "spec.py").write_text(_unmarked(spec))
    reference = (folder / "reference.py").read_text().replace(
        'raise NotImplementedError("ASTRA-TODO: compute out in float64 from the inputs")',
        'return {"out": inputs["x"].astype(np.float64) * np.float32(0.5) + inputs["y"].astype(np.float64)}')
    (folder / "reference.py").write_text(_unmarked(reference))
    baseline = _unmarked((folder / "baseline.cu").read_text())
    (folder / "baseline.cu").write_text(baseline)
    template = baseline.replace("//@ block: 256", "//@ param THREADS: 128, 256, 512 -- threads per CTA\n"
                                "//@ grid: ceil_div(N, THREADS)\n//@ block: THREADS", 1)
    template = template.replace("//@ grid: ceil_div(N, 256)\n", "", 1)
    (folder / "template.cu").write_text(template)
    assert new_kernel.unfinished(folder) == []
    return folder


def _unmarked(text: str) -> str:
    """Each line with the marker, the marker's comment cut (the user checked it)."""
    out = []
    for line in text.splitlines():
        if new_kernel.TODO in line:
            line = line.split("  # " + new_kernel.TODO)[0].split(" -- " + new_kernel.TODO)[0]
        out.append(line)
    return "\n".join(out) + "\n"
