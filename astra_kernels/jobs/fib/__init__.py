"""FlashInfer-Bench: its definitions taken as kernel folders (`astra import-fib`), the tuned result handed
back as a Solution and traces in its trace-set layout (`astra export --fib`), for its own evaluator
to judge. definition.py reads its JSON, families/ holds the kernels this project writes for it,
importing.py writes the folder, folder.py is what that folder runs, solution.py the export."""
