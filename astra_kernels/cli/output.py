"""Where the `astra` command writes: one rich console for every command."""

from rich.console import Console

console = Console()
