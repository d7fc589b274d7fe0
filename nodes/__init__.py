"""One module per node of the agent graph; prompts live beside them in prompts/."""
