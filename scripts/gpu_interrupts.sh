#!/usr/bin/env bash
# Ctrl-C and SIGTERM during a real `astra tune` on the local GPU (compiling and evaluating), then
# the same command again: how fast it stops, its exit status, what it says, whether any process it
# started is left, how many evaluations the results store kept, and that the rerun goes on from them.
#   bash scripts/gpu_interrupts.sh DIR      (the package importable, as for scripts/gpu_check.sh)
# docs/reliability.md quotes its output.
set -u
out=${1:?usage: scripts/gpu_interrupts.sh DIR}
mkdir -p "$out"
export WORK=$(mktemp -d) PYTHONUNBUFFERED=1
trap 'rm -rf "$WORK"' EXIT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/device.txt"
python3 - 2>&1 <<'PY' | tee "$out/interrupts.log"
import os, signal, subprocess, sys, time
def descendants(root):
    table = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                s = open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()
                table[int(d)] = (s[0], int(s[1]), int(s[2]))
            except OSError:
                pass
    found, todo = set(), [root]
    while todo:
        p = todo.pop()
        for pid, (_, ppid, _) in table.items():
            if ppid == p and pid not in found:
                found.add(pid); todo.append(pid)
    return found | {pid for pid, (_, _, g) in table.items() if g == root and pid != root}
def alive(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] not in "ZX"
    except OSError:
        return False
for name, sig, wait in (("sigint", signal.SIGINT, 25), ("sigterm", signal.SIGTERM, 40)):
    cmd = [sys.executable, "-P", "-m", "astra_kernels.cli", "tune", "rmsnorm", "--shapes", "128x4096,2048x8192",
           "--seconds", "60", "--out", f"{os.environ['WORK']}/tune-{name}"]
    env = dict(os.environ, ASTRA_CACHE_DIR=f"{os.environ['WORK']}/cache-{name}")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    time.sleep(wait)
    before = descendants(p.pid)
    sent = time.monotonic()
    os.killpg(p.pid, sig) if sig == signal.SIGINT else os.kill(p.pid, sig)
    text = p.communicate(timeout=120)[0].decode()
    took = time.monotonic() - sent
    time.sleep(1)
    left = [pid for pid in before if alive(pid)]
    import sqlite3
    rows = sqlite3.connect(f"{os.environ['WORK']}/tune-{name}/results.sqlite").execute("select count(*), sum(status='ok') from results").fetchone()
    print(f"{name}: after {wait} s, exit {p.returncode} in {took:.2f} s; {len(before)} descendants before, alive after: {left}; "
          f"store rows (all, ok): {rows}; traceback: {'Traceback' in text}")
    print("  output:", text.strip().replace("\n", "\n          "))
    t0 = time.monotonic()
    r = subprocess.run(cmd[:-2] + ["--budget", "4", "--out", f"{os.environ['WORK']}/tune-{name}"], capture_output=True, text=True, env=env)
    print(f"  rerun with --budget 4: exit {r.returncode} in {time.monotonic() - t0:.1f} s; last line: {r.stdout.strip().splitlines()[-1][:200]}")
PY

