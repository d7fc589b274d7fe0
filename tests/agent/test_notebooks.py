"""The notebooks, executed as a user would run them, in replay mode (a results store recorded on an
H200), and their outputs checked: the quickstart tunes and shows the dispatch table; the
embedding notebook runs the agent as a node of a parent graph and receives its streamed events; the
agent notebook runs the chat-model loop against a local stub endpoint that answers from a script."""

from __future__ import annotations

import gzip
import json
import re
import sqlite3
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def _run(name: str, monkeypatch, replay: bool = True) -> str:
    """Execute the notebook in its own folder; return all it printed or displayed. `replay=False`
    leaves the choice to the notebook: its local GPU where it finds one."""
    if replay:
        monkeypatch.setenv("ASTRA_REPLAY", "1")  # the recorded store, even on a machine with a GPU
    else:
        monkeypatch.delenv("ASTRA_REPLAY", raising=False)
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    texts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            assert output.get("output_type") != "error", output
            data = output.get("data", {})
            texts.append(output.get("text", "") + data.get("text/markdown", "") + data.get("text/plain", ""))
    return "\n".join(texts)


def test_quickstart_tunes_and_shows_the_table(monkeypatch):
    text = _run("quickstart.ipynb", monkeypatch)
    assert "replaying h200-2026-11-28/rmsnorm.sqlite.gz (NVIDIA H200)" in text
    # the recording's figures at 16384x8192 (`astra report recorded:h200-2026-11-28 --kernel rmsnorm`):
    # baseline 187.93 us, fastest measured 129.48 us
    assert "16384x8192: baseline  187.93 us, dispatched  129.48 us (1.45x" in text
    assert "| shape | space |" in text  # the report, rendered as markdown
    assert "4096x8192: template" in text and "(nearest tuned shape 2048x8192)" in text


def test_embedding_streams_the_agents_events_through_a_parent_graph(monkeypatch):
    text = _run("embedding.ipynb", monkeypatch)
    events = [line for line in text.splitlines() if line.startswith("[astra:")]
    assert any("load: rmsnorm bf16 baseline" in e for e in events)
    assert any("load: search floor: candidate 1, the table shipped for NVIDIA H200" in e for e in events)
    assert any("tuner: candidate 2" in e for e in events) and any("reporter: done" in e for e in events)
    summary = text.strip().splitlines()[-1]
    assert summary.startswith("rmsnorm: ") and "over the baseline (128x4096" in summary
    assert float(summary.split(": ")[1].split("x")[0]) > 1.0


def _recorded_figures(tmp_path) -> dict[str, tuple[float, float]]:
    """Per shape label of the recording: (the baseline's time, the fastest template configuration's)."""
    from astra_kernels import suite
    from astra_kernels.suite import recordings

    spec = suite.load("rmsnorm").spec
    copy = tmp_path / "recording.sqlite"
    copy.write_bytes(gzip.decompress(recordings.find("rmsnorm").path.read_bytes()))
    with sqlite3.connect(copy) as db:
        rows = db.execute("SELECT shape, which, min(median_us) FROM results WHERE kernel = 'rmsnorm' AND dtype = 'bf16' "
                          "AND status = 'ok' GROUP BY shape, which").fetchall()
    figures: dict[str, dict[str, float]] = {}
    for shape, which, us in rows:
        figures.setdefault(spec.label(json.loads(shape)), {})[which] = us
    return {label: (f["baseline"], f["template"]) for label, f in figures.items()}


def _no_endpoint(monkeypatch) -> None:
    """No real endpoint, whatever the machine's environment: the notebook must fall back to its stub,
    and no proxy may stand between the client and 127.0.0.1."""
    for name in ("OPENAI_API_KEY", "ASTRA_MODEL", "ASTRA_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_BASE",
                 "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


def test_agent_notebook_runs_the_chat_model_loop_on_a_scripted_endpoint(monkeypatch, tmp_path):
    _no_endpoint(monkeypatch)
    text = _run("agent.ipynb", monkeypatch)
    assert "SCRIPTED ANSWERS, NOT A MODEL" in text
    assert "The stub served 6 chat-completion requests over HTTP" in text  # check, 3 plans, template, rewrite
    events = [line.strip() for line in text.splitlines() if " | " in line]
    plans = [e.split(" | ", 1)[1].split(": ")[:2] for e in events if e.startswith("planner |")]
    assert plans == [["round 1", "templatize"], ["round 2", "rewrite"], ["round 3", "stop"]]
    assert any(e.startswith("profiler | candidate 1 accepted at 2 of 2 shapes") for e in events)  # the search floor
    assert any(e.startswith("templater | candidate 2: a template of 9 parameters") for e in events)
    # the run stopped after the first verdict (the floor's) and a new graph resumed it from the SQLite checkpoint
    assert "0 planner round(s) done, best so far candidate 1, next ('planner',)" in text
    # the rewrite was never measured on the recording's GPU: unmeasured at every shape (not estimated, and not
    # sent back to be fixed as if it were wrong)
    tester = [e for e in events if e.startswith("tester |")]
    assert len(tester) == 1 and "candidate 4 is unmeasured" in tester[0] and "128x4096, 16384x8192" in tester[0]
    assert not any(e.startswith("generator |") and "attempt 2" in e for e in events)
    # the report holds the recording's own figures: its baseline, and its fastest configuration at each shape
    recorded = _recorded_figures(tmp_path)
    for label in ("128x4096", "16384x8192"):
        baseline, best = recorded[label]
        assert f"| {label} | {baseline:.2f} | {best:.2f} | {baseline / best:.3f} |" in text
    assert "- candidate 1 (tune): accepted" in text and "- candidate 3 (tune): slower" in text  # the floor, the re-search
    assert "- candidate 4 (rewrite): unmeasured" in text


@pytest.mark.gpu
def test_notebooks_measure_on_the_local_gpu(monkeypatch):
    """The branch a user with a GPU runs: every notebook measures instead of replaying, and what it
    prints is a measurement (times above zero, a tuned pick at or under the baseline's time)."""
    _no_endpoint(monkeypatch)
    quick = _run("quickstart.ipynb", monkeypatch, replay=False)
    assert "measuring on the local GPU" in quick and "replaying" not in quick
    lines = [line for line in quick.splitlines() if ": baseline " in line and " us, dispatched " in line]
    assert len(lines) == 3, quick
    for line in lines:
        baseline = float(line.split("baseline")[1].split("us")[0])
        dispatched = float(line.split("dispatched")[1].split("us")[0])
        assert 0 < dispatched <= baseline, line
    embedded = _run("embedding.ipynb", monkeypatch, replay=False)
    assert "measuring on the local GPU" in embedded
    assert embedded.strip().splitlines()[-1].startswith("rmsnorm: ")
    agent = _run("agent.ipynb", monkeypatch, replay=False)
    assert "measured on the local GPU" in agent and "SCRIPTED ANSWERS, NOT A MODEL" in agent
    # on a GPU both candidates are measured, neither refused: each correct, and accepted or slower
    # than the best so far (H100, 2026-11-24: the 20-second tune's template, candidate 2 after the
    # templater's 1, faster at no shape; the scripted rewrite accepted)
    assert "unrecorded" not in agent and "unmeasured" not in agent
    for candidate in ("2 (tune)", "3 (rewrite)"):
        assert re.search(rf"- candidate {re.escape(candidate)}: (accepted|slower), \d+\.\d+ us", agent), agent
