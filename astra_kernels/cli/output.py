"""Where the `astra` command and the scripts under bench/ write: one rich console and one way to
print a table, so that output that is not a terminal is whole.

A terminal gets rich's view: text wrapped at its width, tables drawn in boxes. Anything else (a
pipe, a log file, CI) would get the same view at 80 columns (or at $COLUMNS, or at the width of
whatever terminal stdin happens to be): every line hard-wrapped, so an error naming a long path
is split over lines, and table cells cut to `sil…`. A log is read by grep, diffed and pasted into
docs, so there nothing is wrapped and a table is a plain Markdown table with every cell whole.
Which of the two is decided at each print, not at import: the same process may write to a
terminal or, redirected or under pytest's capture, to something else.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import MofNCompleteColumn, Progress
from rich.table import Table
from rich.text import Text


class WholeLineConsole(Console):
    """A rich Console that, when it is not writing to a terminal, prints each line whole (rich's
    soft wrap: no wrapping, no cropping) unless a caller asks otherwise."""

    def print(self, *objects, soft_wrap: bool | None = None, **kwargs) -> None:
        if soft_wrap is None and not self.is_terminal:
            soft_wrap = True
        super().print(*objects, soft_wrap=soft_wrap, **kwargs)

    def on_broken_pipe(self) -> None:
        """The reader went away (`astra kernels | head -1`). Rich's own answer is SystemExit(1),
        an exit 1 with no message, as if the command had failed; raised as BrokenPipeError
        instead, the CLI's main ends the command quietly with 141 (128 + SIGPIPE), as a Unix tool
        a pipe's reader left is reported."""
        raise BrokenPipeError()


console = WholeLineConsole()
# For what a command says beside a result it prints to stdout as JSON (--json): the JSON stays whole.
side_console = WholeLineConsole(stderr=True)


def cannot_measure(exc: Exception) -> int:
    """What a command says when it cannot open its evaluator, and its exit code: without a GPU, what
    runs without one (NoGpuError's message); any other AstraError, the error. One line either way."""
    from rich.markup import escape

    from astra_kernels.tools.errors import NoGpuError

    if isinstance(exc, NoGpuError):
        console.print(f"[yellow]no GPU here:[/yellow] {exc}", highlight=False)
    else:
        console.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
    return 2


def messages(args) -> WholeLineConsole:
    """Where a command's messages go: stderr under --json (its stdout holds the JSON alone), else
    stdout with the rest of what it prints."""
    return side_console if getattr(args, "json", False) else console


def _plain(cell: object) -> str:
    """A cell as plain text: markup strings and Text lose their styles; any other renderable is
    rendered as wide as it likes, without colour."""
    if cell is None:
        return ""
    if isinstance(cell, str):
        return Text.from_markup(cell).plain
    if isinstance(cell, Text):
        return cell.plain
    sink = Console(file=io.StringIO(), width=100_000, color_system=None, soft_wrap=True)
    sink.print(cell)
    return sink.file.getvalue().rstrip("\n")


def _cell(cell: object) -> str:
    """A cell on one Markdown table line: `|` escaped, its own lines joined by `<br>` (what
    Markdown renders as a line break inside a cell)."""
    lines = [line.strip() for line in _plain(cell).splitlines()]
    return "<br>".join(line for line in lines if line).replace("|", "\\|")


def markdown_table(table: Table) -> list[str]:
    """A rich Table as lines of a Markdown table, read from the Table itself: its title as a line
    above, the header row (even where the terminal view hides it: Markdown needs one), the
    `|---|` row (`---:` for right-justified columns), every row with every cell whole, the
    caption as a line below."""
    lines = []
    if table.title:
        lines.append(_plain(table.title).strip())
    columns = table.columns
    align = {"right": "---:", "center": ":---:"}
    lines.append("| " + " | ".join(_cell(c.header) for c in columns) + " |")
    lines.append("|" + "|".join(align.get(c.justify, "---") for c in columns) + "|")
    cells = [list(c.cells) for c in columns]
    for row in range(table.row_count):
        lines.append("| " + " | ".join(_cell(col[row] if row < len(col) else "") for col in cells) + " |")
    if table.caption:
        lines.append(_plain(table.caption).strip())
    return lines


def print_table(table: Table, out: Console | None = None) -> None:
    """Print a table: rich's boxed view on a terminal, a whole Markdown table anywhere else."""
    out = out or console
    if out.is_terminal:
        out.print(table)
        return
    for line in markdown_table(table):
        out.print(line, markup=False, highlight=False, emoji=False, soft_wrap=True)


@contextmanager
def progress_bar(description: str, *, enabled: bool = True) -> Iterator[Callable[..., None]]:
    """A transient bar for long work (compiling a space, a search, a check), as
    `update(done=, total=, description=, advance=)` (`restart=True`: a new stage of unknown size,
    the bar back to a spinner): on a terminal it shows what is being done
    and how far it is, and is gone when done. Elsewhere nothing: a log gets the lines that say
    what came of it, not a bar's redraws (nor the blank line rich leaves when it has none).
    `enabled=False`: no bar either, for a command that may stop to ask a question."""
    if not enabled or not console.is_terminal:
        yield lambda *args, **kwargs: None
        return
    with Progress(*Progress.get_default_columns(), MofNCompleteColumn(), console=console, transient=True) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int | None = None, total: int | None = None, description: str | None = None,
                   advance: int | None = None, restart: bool = False) -> None:
            if restart:
                bar.reset(task, total=None, description=description)
            else:
                bar.update(task, completed=done, total=total, description=description, advance=advance)

        yield update


def cluster_table(rows: list[dict], title: str) -> Table:
    """The cluster's workers, one row each: where, which GPU, what it measures, how many done."""
    table = Table(title=title)
    for name, justify in (("worker", "right"), ("where", "left"), ("gpu", "left"), ("state", "left"),
                          ("done", "right"), ("measuring now", "left")):
        table.add_column(name, justify=justify)
    for row in rows:
        state = row["state"] + (f" (replaces {row['replaces']})" if row.get("replaces") is not None else "")
        table.add_row(str(row["worker"]), row["where"], row["gpu"], state, str(row["done"]), row["doing"] or "-")
    return table


@contextmanager
def cluster_view(status: Callable[[], list[dict]], title: str) -> Iterator[None]:
    """On a terminal, the cluster's workers live, redrawn twice a second while the block runs
    (`status()`: tools/cluster/pool.py's rows); elsewhere nothing until the caller prints the
    final table (print_table(cluster_table(...))), so a log gets whole lines, not redraws."""
    if not console.is_terminal:
        yield
        return
    from rich.live import Live

    with Live(cluster_table(status(), title), console=console, refresh_per_second=2, transient=True,
              get_renderable=lambda: cluster_table(status(), title)):
        yield
