"""What several nodes share (the chat model and prompts, measuring, measured facts, progress
events, attempt bookkeeping), so that no node imports another node."""
