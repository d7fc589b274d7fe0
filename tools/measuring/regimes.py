"""The L2 regime a kernel is timed in, spelt once: tables, contexts, requests and command lines
take it from here.

"cold": rotating input sets larger than L2, so every launch reads memory (a kernel between others
that have evicted its operands: prefill). "warm": one set, left resident in L2 by the launch before,
as when the previous op has just written the input (decode's chain of small ops). docs/design.md,
"Two L2 regimes".
"""

from __future__ import annotations

from typing import Literal, get_args

L2Regime = Literal["cold", "warm"]
L2_REGIMES: tuple[str, ...] = get_args(L2Regime)
