"""Many GPUs and hosts through Ray: one evaluation worker per GPU as an actor, compiles as tasks.

`runtime.py` connects to (or starts) the cluster; `host.py` is what runs in each actor (an
EvaluationWorker that owns its GPU's CUDA context, or a recording's stand-in); `pool.py` hands
evaluations to idle actors, replaces the ones that die and shows what each is doing;
`compiling.py` sends NVRTC compiles to any node's CPUs. Ray is optional (`pip install
'astra-kernels[ray]'`): only runtime.py imports it (host.py in the actor), when a command is given
`--ray`; the rest of the package may import these modules without Ray installed.
"""
