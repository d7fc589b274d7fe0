"""The agent's nodes: the state and context schema they read (state.py, context.py), one module
per node of the graph, what nodes share (shared/), and their prompts (prompts/)."""
