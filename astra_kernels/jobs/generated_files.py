"""Files the jobs write whose text is fixed apart from a few names, kept as files in generated/
(as the agent's prompts are) rather than as strings in the code that fills them in:

    export_pick.cu.in       the exported .cu's shape-to-kernel pick (KERNEL: the kernel's name)
    export_launch_api.cpp.in  the exported .cu's C API: last_error, pick and launch (@FIELD@ placeholders)
    export_torch_op.cpp.in  the exported kernel as a PyTorch custom op (@FIELD@ placeholders)
    export_launch.py.in     `astra export`'s <kernel>_launch.py (str.format fields)
    tuned_launcher.py.in    `astra tune`'s launcher.py (str.format fields)

and the one owner of how a value gets into generated text. Values come from files and recordings
a user may have been handed (a results store's device name, a hand-edited report.json, a dispatch
table, an `--out` path): pasted raw, a device name that closes launcher.py's docstring runs Python
when the launcher is imported, a newline in a `// Tuned on:` comment starts a line of host code in
the exported .cu, and raw HTML lands in a rendered report. So every such value goes through one of
these: `fill` for the templates, `comment_text` / `comment_line` for C++ comments, `md_text` /
`md_code` for Markdown, `define_line` for a #define. A strange but harmless value is escaped, so it
still shows (and a device of an odd name still exports); only where the text must be a name or a
number is a value refused.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from astra_kernels.tools.errors import UsageError

GENERATED = Path(__file__).parent / "generated"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_CPP_CODE = re.compile(r"[A-Za-z0-9_ \n()\[\]{},;:*&!<>=+\-/%?.|~^]*\Z")


def generated_text(name: str) -> str:
    """The template file `name` of generated/, as text."""
    return (GENERATED / name).read_text()


def one_line(value: object) -> str:
    """`value` as text of one line: each character that is not printable (a newline or another
    control character, a Unicode line or paragraph separator, a bidirectional override that makes
    code read differently from how it compiles) written as its Python escape, `\\n` for a newline."""
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(value))


def comment_text(value: object) -> str:
    """`value` as text inside a C/C++ comment: one line, no `*/` to end a block comment, and no
    backslash (or `??/` trigraph) at its end, which would splice the next line into the comment."""
    text = one_line(value).replace("*/", "* /").replace("??/", "?\\?/")
    if m := re.search(r"\\\s*\Z", text):
        text = text[:m.start()] + "\\x5c"
    return text


def comment_line(line: str) -> str:
    """A `//` comment line of generated C++ made safe whatever the values written into it."""
    assert line.startswith("//"), line
    return "//" + comment_text(line[2:])


def md_text(value: object) -> str:
    """`value` as inline Markdown text that shows as written: one line, no raw HTML, no table cell
    break, no emphasis, link or code span opened by it. `_` inside a word (silu_and_mul, sm_90)
    starts no emphasis, so it is left as it is."""
    text = re.sub(r"[\\`*\[\]|]", r"\\\g<0>", one_line(value))
    text = re.sub(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])", r"\\_", text)
    return html.escape(text, quote=False)


def md_code(value: object) -> str:
    """`value` as a Markdown code span (a command line, a path): one line, fenced by more backticks
    than it holds in a row, and its `|` escaped so that it breaks no table cell."""
    text = one_line(value).replace("|", "\\|")
    fence = "`" * (1 + max((len(run) for run in re.findall("`+", text)), default=0))
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def py_text(value: object) -> str:
    """`value` as text inside a Python string literal (a docstring): one line, and every backslash
    and quote escaped, so no value can end the literal."""
    return one_line(value).replace("\\", "\\\\").replace('"', '\\"').replace("'", "\\'")


def define_line(name: str, value: int | str) -> str:
    """`#define NAME VALUE` of a configuration: the name must be a C identifier and the value an
    integer (or an identifier: an entry point's new name); anything else is refused, naming it."""
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        raise UsageError(f"#define of {one_line(name)!r}: a configuration's name must be a C identifier")
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if not (is_int or (isinstance(value, str) and _IDENTIFIER.match(value))):
        raise UsageError(f"#define {name}: its value {one_line(value)!r} must be an integer")
    return f"#define {name} {value}"


def fill(name: str, **fields: object) -> str:
    """The template `name` of generated/ with `fields` in, each escaped for where the template puts it.

    A .py.in takes str.format fields: in its docstring a value is Python string-literal text
    (`py_text`); a field the template also uses in its code (a function's name) must be an
    identifier. A .cu.in's fields are names in C++ code (its placeholders are the field names,
    e.g. KERNEL), so each must be a C identifier."""
    template = generated_text(name)
    if name.endswith(".py.in"):
        docstring_end = template.index('"""', template.index('"""') + 3) + 3
        in_code = {m.group(1) for m in re.finditer(r"\{(\w+)\}", template[docstring_end:])}
        for key in in_code:
            if not _IDENTIFIER.match(str(fields[key])):
                raise UsageError(f"{name}: {key} {one_line(fields[key])!r} must be a Python identifier")
        return template.format(**{key: py_text(value) for key, value in fields.items()})
    if name.endswith(".cu.in"):
        for key, value in fields.items():
            if not _IDENTIFIER.match(str(value)):
                raise UsageError(f"{name}: {key} {one_line(value)!r} must be a C identifier")
            template = template.replace(key, str(value))
        return template
    if name.endswith(".cpp.in"):
        # @KEY@ placeholders: C++ this package wrote from a spec's names and translated expressions.
        # It may hold no quote, backslash, '#' or comment opener, so a placeholder inside one of the
        # template's string literals (the op's schema) cannot end the literal or start a directive.
        for key, value in fields.items():
            text = str(value)
            if not _CPP_CODE.match(text) or "//" in text or "/*" in text:
                raise UsageError(f"{name}: {key} {one_line(text)[:80]!r} holds characters generated C++ may not")
            template = template.replace(f"@{key}@", text)
        return template
    raise ValueError(f"{name}: no escaping is known for this kind of template")
