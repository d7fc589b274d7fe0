"""Searching a template's parameters: hardware limits, the space of runnable configurations,
strategies that only propose, the runner that evaluates, and the plan of the next round."""
