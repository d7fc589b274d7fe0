"""A kernel made with `astra new --from` and filled in runs like a shipped one on a real GPU: `astra
check` passes it against its reference, and `astra tune` writes its dispatch table."""

from __future__ import annotations

import json

import pytest

from astra_kernels import cli

from support import filled_kernel, kernel_path

pytestmark = pytest.mark.gpu


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    (tmp_path / "kernels").mkdir()
    yield from kernel_path.on_kernel_path(monkeypatch, tmp_path / "kernels")


def test_check_then_tune_a_kernel_made_with_astra_new(on_path, capsys):
    filled_kernel.filled(on_path)
    capsys.readouterr()  # what `astra new` said
    assert cli.main(["check", "scale_add", "--samples", "3", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert {r["status"] for r in results} == {"ok"} and len(results) == 2 * 4  # two shapes, baseline + three
    out = on_path.parent / "out"
    assert cli.main(["tune", "scale_add", "--set", "mine", "--out", str(out), "--json"]) == 0
    capsys.readouterr()
    table = json.loads((out / "dispatch.json").read_text())
    assert len(table["entries"]) == len(filled_kernel.SHAPES)
    for entry in table["entries"]:  # the template at a THREADS of its list, or the baseline where it won
        assert entry["config"] == {} or entry["config"]["THREADS"] in (128, 256, 512), entry
