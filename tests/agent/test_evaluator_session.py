"""The evaluators and results stores the agent's runs borrow (astra_kernels/evaluators.py's
EvaluatorSession): a run given a session borrows from it, not from the process's; two runs of one
session share its replay and store; another recording at the same path is refused by name, and so is
another session's use of a path that is one session's replay copy; closing
a session closes what it opened, and it opens them again when used after."""

from __future__ import annotations

import pytest

from astra_kernels.evaluators import EvaluatorSession, process_session
from astra_kernels.graph import RunContext
from astra_kernels.nodes.shared import measure
from astra_kernels.tools.errors import AstraError


def test_a_run_borrows_from_its_own_session_and_runs_of_one_session_share(tmp_path):
    results = str(tmp_path / "results.sqlite")
    with EvaluatorSession() as session:
        first = RunContext(replay="recorded", results=results, session=session)
        second = RunContext(replay="recorded", results=results, session=session)
        one, two = measure.stored_evaluator(first, "rmsnorm"), measure.stored_evaluator(second, "rmsnorm")
        assert one.worker is two.worker and one.store is two.store
        assert measure.session(first) is session and measure.session(RunContext()) is process_session()
        other = EvaluatorSession()  # another session opens its own, the process's is untouched
        mine = measure.stored_evaluator(RunContext(replay="recorded", results=str(tmp_path / "mine.sqlite"),
                                                   session=other), "rmsnorm")
        assert mine.worker is not one.worker and results not in process_session()._stores
        with pytest.raises(AstraError, match="working copy of a replay of another evaluator session"):
            other.replay("rmsnorm", results, "recorded")  # would replace the file the first session reads
        with pytest.raises(AstraError, match="working copy of a replay of another evaluator session"):
            other.store(results)
        other.close()
        with pytest.raises(AstraError, match="working copy of .*needs another results path"):
            measure.evaluator(RunContext(replay="recorded:h200-2026-11-23", results=results, session=session), "rmsnorm")
        assert one.worker.device["name"]
    assert session._stores == {} and session._replays == {}  # closed on leaving the block
    again = measure.stored_evaluator(RunContext(replay="recorded", results=results, session=session), "rmsnorm")
    assert again.worker is not one.worker  # used after closing: opened anew
    session.close()
    EvaluatorSession().store(results).close()  # released on closing: another session may use the path now
