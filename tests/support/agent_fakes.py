"""A scripted chat model and a scripted GPU for walking the agent graph on a CPU."""

from __future__ import annotations

import os
import re
import signal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatGeneration, ChatResult

from astra_kernels import suite
from astra_kernels.tools.measuring.correctness import Check
from astra_kernels.tools.measuring.evaluation import EvaluationResult
from astra_kernels.tools.toolchain.timing import Timing

BASELINE = suite.load("silu_and_mul").baseline.source


class ScriptedChatModel(BaseChatModel):
    """Answers from a list, in order (an Exception in the list is raised, an AIMessage returned as it
    is: one cut off, with its response_metadata); records every prompt and the arguments bound to it."""

    answers: list
    seen: list = []
    bound: list = []

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages, stop=None, run_manager=None, **kwargs) -> ChatResult:
        self.seen.append(messages)
        self.bound.append(kwargs)
        if not self.answers:
            raise AssertionError("the script ran out of answers")
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return ChatResult(generations=[ChatGeneration(
            message=answer if isinstance(answer, AIMessage) else AIMessage(content=answer))])


def kernel(marker: str) -> str:
    """The baseline with a marker the fake GPU reads: compile_error, wrong, us=N, or
    per-shape=LABEL:US,LABEL:US."""
    # The marker is code too, not only a comment: kernels that differ in comments alone are one kernel.
    return f"// fake: {marker}\n#define FAKE_MARKER \"{marker}\"\n{BASELINE}"


def code_answer(marker: str, words: str = "Split each row over more CTAs.") -> str:
    return f"{words}\n```cuda\n{kernel(marker)}```"


def decision(action: str, why: str = "measured facts") -> str:
    return f'{{"action": "{action}", "rationale": "{why}", "optimizations": ["more CTAs per row"]}}'


class FakeGPU:
    """Evaluates by the marker in the source; the baseline takes 3 us at every shape; a template
    configuration of the suite's silu template takes less with wider vectors."""

    device = {"name": "Fake GPU", "arch": "sm_90", "multiprocessors": 132, "max_shared_per_block_optin": 232448}

    def __init__(self, crash_after: int | None = None, kill: bool = False):
        self.calls = 0
        self.crash_after = crash_after
        self.kill = kill  # SIGKILL this process instead of raising

    def evaluate(self, request) -> EvaluationResult:
        self.calls += 1
        if self.crash_after is not None and self.calls > self.crash_after:
            if self.kill:
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError("the process was killed")
        marker = re.search(r"// fake: (\S+)", request.source)
        marker = marker.group(1) if marker else ""
        base = {"device": self.device["name"], "arch": "sm_90", "label": request.label, "wall_seconds": 0.01}
        if marker == "compile_error":
            return EvaluationResult(status="compile_error", message="candidate.cu(14): error: identifier \"vv\" is undefined", **base)
        if marker.startswith("wrong"):
            check = Check(name="out (seed 1)", passed=False, detail=(
                "17 of 65536 elements outside rtol=0.016 atol=0.016; worst at (3, 5): got 2.5, expected 0.25"))
            # as the real evaluation reports it: the failed checks in the message too
            return EvaluationResult(status="incorrect", checks=[check], message=f"{check.name}: {check.detail}", **base)
        if marker.startswith("us="):
            us = float(marker[3:])
        elif marker.startswith("per-shape="):  # per-shape=16x4096:1.0,64x8192:5.0 (3 us elsewhere)
            times = dict(item.split(":") for item in marker[len("per-shape="):].split(","))
            us = float(next((times[t] for t in request.label.split(" ") if t in times), 3.0))
        elif request.source != BASELINE and "VEC" in request.options.defines:
            us = 1.0 + 4.0 / request.options.defines["VEC"]
        else:
            us = 3.0
        timing = Timing(median_us=us, min_us=us, max_us=us, spread=0.0, samples_us=[us], launches_per_replay=10,
                        input_sets=10, method="graph") if request.time else None
        return EvaluationResult(status="ok", checks=[Check(name="out", passed=True)] if request.check else [],
                                timing=timing, fraction_of_copy_bandwidth=0.3 if request.time else None, **base)
