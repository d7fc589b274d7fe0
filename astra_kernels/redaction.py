"""Secrets cut out of text before it is printed, logged or checkpointed.

Used by the chat model's messages (nodes/shared/chat.py) and by the checkpointer (graph/checkpoints.py),
which must agree on what a secret looks like; neither may import the other, so it lives here.
"""

from __future__ import annotations

import os
import re

_SECRET_PATTERNS = (re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"), re.compile(r"(?i)\bBearer\s+\S+"))


def redact(text: str, *secrets: str | None) -> str:
    """`text` without `secrets`, the environment's *_API_KEY / *_TOKEN values, key-shaped strings
    (sk-..., Bearer ...) and the credentials of any URL in it."""
    known = [v for k, v in os.environ.items() if k.endswith(("_API_KEY", "_TOKEN")) and len(v) >= 8]
    for secret in sorted({s for s in (*secrets, *known) if s}, key=len, reverse=True):
        text = text.replace(secret, "[redacted]")
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub("[redacted]", text)
    return re.sub(r"(\w+://)[^/\s@]+@", r"\1[redacted]@", text)
