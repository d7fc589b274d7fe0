"""The notebooks, executed as a user would run them, in replay mode (a results store recorded on an
H200), and their outputs checked: the quickstart tunes and shows the dispatch table; the
embedding notebook runs the agent as a node of a parent graph and receives its streamed events."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def _run(name: str, monkeypatch) -> str:
    """Execute the notebook in its own folder; return all it printed or displayed."""
    monkeypatch.setenv("ASTRA_REPLAY", "1")  # the recorded H200 store, even on a machine with a GPU
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
    assert "replaying h200-2026-11-23/rmsnorm.sqlite.gz (NVIDIA H200)" in text
    # the recorded run's figures at 16384x8192: baseline 188.51 us, fastest measured 131.30 us
    assert "16384x8192: baseline  188.51 us, dispatched  131.30 us (1.44x" in text
    assert "| shape | space |" in text  # the report, rendered as markdown
    assert "4096x8192: template" in text and "(nearest tuned shape 2048x8192)" in text


def test_embedding_streams_the_agents_events_through_a_parent_graph(monkeypatch):
    text = _run("embedding.ipynb", monkeypatch)
    events = [line for line in text.splitlines() if line.startswith("[astra:")]
    assert any("load: rmsnorm bf16 baseline" in e for e in events)
    assert any("tuner: candidate 1" in e for e in events) and any("reporter: done" in e for e in events)
    summary = text.strip().splitlines()[-1]
    assert summary.startswith("rmsnorm: ") and "over the baseline (128x4096" in summary
    assert float(summary.split(": ")[1].split("x")[0]) > 1.0
