"""FlashInfer-Bench definitions and workloads for the tests of jobs/fib/ (CPU and GPU)."""

from __future__ import annotations

import json
from pathlib import Path

# A definition no file of the project holds: a fused add + RMS norm whose eps is a scalar input
# (1e-5, given by the workloads) and whose width, 2560, no table was tuned at.
UNSEEN = {
    "name": "fused_add_rmsnorm_h2560", "op_type": "rmsnorm",
    "axes": {"M": {"type": "var"}, "H": {"type": "const", "value": 2560}},
    "inputs": {"x": {"shape": ["M", "H"], "dtype": "bfloat16"}, "res": {"shape": ["M", "H"], "dtype": "bfloat16"},
               "gamma": {"shape": ["H"], "dtype": "bfloat16"}, "epsilon": {"shape": None, "dtype": "float32"}},
    "outputs": {"y": {"shape": ["M", "H"], "dtype": "bfloat16"}},
    "constraints": ["H % 8 == 0"],
    "reference": ("import torch\n\ndef run(x, res, gamma, epsilon):\n    s = x.float() + res.float()\n"
                  "    y = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + epsilon) * gamma.float()\n"
                  "    return y.to(x.dtype)\n"),
}


def workloads_file(path: Path, name: str, tokens, axis="M", scalars=None) -> Path:
    lines = [{"definition": name, "workload": {"axes": {axis: t}, "uuid": f"w{t}",
                                              "inputs": {k: {"type": "scalar", "value": v} for k, v in (scalars or {}).items()}},
              "solution": None, "evaluation": None} for t in tokens]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def write_definition(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / f"{data['name']}.json"
    path.write_text(json.dumps(data))
    return path
