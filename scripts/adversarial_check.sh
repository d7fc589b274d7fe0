#!/usr/bin/env bash
# The GPU tests of measurement an optimiser cannot game (issue 39), logs under DIR.
#   bash scripts/adversarial_check.sh DIR
# Run from the checkout with the package importable (pip install -e ., or a wheelhouse install on
# PYTHONPATH: see the README). Each step has its own time limit; a failure is reported and the next
# step still runs. -s prints the tables docs/reliability.md publishes.
set -u
out=${1:?usage: scripts/adversarial_check.sh DIR}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
status=0

source "$(dirname "$0")/steps.sh"  # step NAME SECONDS COMMAND...

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$out/device.txt" 2>&1
step adversarial 600 python3 -P -m pytest -q -s -p no:cacheprovider -m gpu tests/tools/measuring/test_adversarial_on_gpu.py
step kernel_faults 600 python3 -P -m pytest -q -s -p no:cacheprovider -m gpu tests/reliability/test_kernel_faults_on_gpu.py
step device_checks 300 python3 -P -m pytest -q -p no:cacheprovider -m gpu tests/tools/measuring/test_device_checks_on_gpu.py
exit $status
