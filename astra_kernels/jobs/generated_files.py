"""Files the jobs write whose text is fixed apart from a few names, kept as files in generated/
(as the agent's prompts are) rather than as strings in the code that fills them in:

    export_pick.cu.in       the exported .cu's shape-to-kernel pick (KERNEL: the kernel's name)
    export_launch.py.in     `astra export`'s <kernel>_launch.py (str.format fields)
    tuned_launcher.py.in    `astra tune`'s launcher.py (str.format fields)
"""

from __future__ import annotations

from pathlib import Path

GENERATED = Path(__file__).parent / "generated"


def generated_text(name: str) -> str:
    """The template file `name` of generated/, as text."""
    return (GENERATED / name).read_text()
