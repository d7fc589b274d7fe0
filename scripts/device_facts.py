"""Give a recording the launch floor of its GPU that its own run did not keep.

    python scripts/device_facts.py RECORDING.sqlite.gz --bench BENCH.json [--multiprocessors N]

Recordings made before runs kept their GPU's device facts (ResultsStore.device_facts, written
since 2026-11-28 by `astra tune` and the agent on a GPU) hold no launch floor, so a replay's agent
judged no shape ("not judged" at every one). This takes the launch floor `astra bench` measured on
the same GPU kind (BENCH.json, one of docs/bench/; choose one of the recording's day, under the
same measuring protocol) and writes it into the recording, saying where it came from, which the
agent's prompt then quotes. `--multiprocessors`: the GPU's SM count, from its datasheet (132 for an
H100 SXM and an H200). The store is rewritten in place, gzip'd without a timestamp. No GPU needed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

from astra_kernels.tools.measuring.replay import ReplayWorker
from astra_kernels.tools.measuring.results import ResultsStore

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recording", type=Path, help="a results store (.sqlite or .sqlite.gz)")
    parser.add_argument("--bench", type=Path, required=True, help="an `astra bench` bench.json of the same GPU kind")
    parser.add_argument("--multiprocessors", type=int, help="the GPU's SM count (its datasheet's)")
    args = parser.parse_args()
    try:
        bench = json.loads(args.bench.read_text())
        device, floor, day = bench["device"], float(bench["launch_floor_us"]), bench["date"][:10]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"{args.bench}: not a bench.json with a device, a date and a launch floor ({exc})", file=sys.stderr)
        return 2
    packed = args.recording.suffix == ".gz"
    with tempfile.TemporaryDirectory() as tmp:
        store_path = Path(tmp) / "results.sqlite"
        if packed:
            with gzip.open(args.recording) as source, open(store_path, "wb") as target:
                shutil.copyfileobj(source, target)
        else:
            shutil.copyfile(args.recording, store_path)
        held = [name for name, _ in ReplayWorker.recorded_devices(store_path)]
        if device not in held:
            print(f"{args.recording} holds no measurement on {device} (it holds {', '.join(held) or 'none'})",
                  file=sys.stderr)
            return 2
        where = args.bench.resolve()
        where = where.relative_to(ROOT) if where.is_relative_to(ROOT) else where
        facts = {"launch_floor_us": floor,
                 "launch_floor_from": f"measured by astra bench on an {device} on {day} ({where}), not in this "
                                      "recording's own run"}
        if args.multiprocessors:
            facts["multiprocessors"] = args.multiprocessors
        with ResultsStore(store_path) as store:
            store.record_device_facts(device, facts)
        if packed:
            with open(store_path, "rb") as source, open(args.recording, "wb") as raw, \
                    gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as target:
                shutil.copyfileobj(source, target)
        else:
            shutil.copyfile(store_path, args.recording)
    print(f"{args.recording}: {device} launch floor {floor:.3f} us from {where}"
          + (f", {args.multiprocessors} SMs" if args.multiprocessors else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
