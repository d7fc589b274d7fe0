"""Parsing a chat model's free-text answers the way real models write them.

Every rule here answers something models actually do:

* Reasoning models emit `<think>...</think>` (or `<thinking>`) before the answer, often with
  draft code and draft JSON inside; drafts must never be taken for the answer. Servers whose chat
  template opens the block in the prompt send only the closing tag, so everything before a lone
  `</think>` is reasoning too; a `<think>` that never closes loses only its tag, so that code
  after it can still be found.
* Models quote the kernel they were given before writing the new one, so the answer's code is the
  LAST block that holds a kernel (`//@ kernel`, else `extern "C"` / `__global__`), not the longest.
* Fences are labelled inconsistently (```cuda, ```cu, ```CUDA, ```C++, ~~~cuda, none at all),
  may be longer than three characters to quote a fence inside, come with CRLF line endings, and
  sit next to ```bash or ```python blocks that are never the kernel. So fences are parsed line by
  line as CommonMark does, not with one regular expression.
* An answer cut off at the model's output limit leaves its last fence open. A kernel that already
  has its directives and a closing brace is used (the compiler judges the rest); anything else is
  reported as never closed, so the repair request can say why.
* Plans arrive inside prose that has braces of its own, in ```json blocks, with trailing commas,
  or as a wrong object followed by a right one; every balanced object is tried in order and the
  first that validates wins. Capitalised choices ("Rewrite") are left to the schema, through
  `normalise_choice` in a before-validator, so validation itself stays exact.
* A model asked for a better kernel sometimes hands back the same one, reformatted or with new
  comments; `same_code` spots that before a GPU is spent on it. `//@` lines are template
  directives, not comments, so they count.
"""

from __future__ import annotations

import json
import re
from itertools import chain
from typing import Iterable, Iterator, NamedTuple

from pydantic import BaseModel, ValidationError

CODE_LANGUAGES = {"cuda", "cu", "cpp", "c++", "c", "cuh", "hpp", "h", ""}
JSON_LANGUAGES = {"json", "jsonc", "json5", ""}

_THINK_BLOCK = re.compile(r"<(think|thinking)>.*?</\1\s*>", re.IGNORECASE | re.DOTALL)
_THINK_CLOSE = re.compile(r"</think(?:ing)?\s*>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"^[ \t]*<think(?:ing)?>[ \t]*\n?|<think(?:ing)?>", re.IGNORECASE | re.MULTILINE)
_OPENING = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_KERNEL = re.compile(r"//@ *kernel\b")
_SOURCE = re.compile(r'extern\s+"C"|__global__')


class Block(NamedTuple):
    """One fenced block: its language (first word of the info string, lowercased; "" if none),
    its contents, and whether a closing fence was found."""

    language: str
    code: str
    closed: bool


def strip_thinking(text: str) -> str:
    """The answer without its reasoning blocks, with CRLF and CR turned into LF."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _THINK_BLOCK.sub("", text)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:  # the opening tag was in the prompt: all before the last lone close is reasoning
        text = text[closes[-1].end():]
    return _THINK_OPEN.sub("", text)


def _scan(text: str) -> list[tuple[Block, int, int]]:
    """Each block with the indexes of its first and last line (fences included) in text's lines."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    found, i = [], 0
    while i < len(lines):
        opening = _OPENING.match(lines[i])
        if not opening or (opening.group(1)[0] == "`" and "`" in opening.group(2)):
            i += 1  # backticks in a backtick info string make it inline code, not a fence
            continue
        fence, info = opening.group(1), opening.group(2).strip()
        indent = len(lines[i]) - len(lines[i].lstrip(" "))
        language = re.match(r"\{?\.?([^\s:{}]*)", info).group(1).lower()
        # Closed at any indentation (CommonMark allows three spaces): models indent the closing fence
        # as deep as the code line it ends, and C++ has no line that is only backticks.
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        end = next((j for j in range(i + 1, len(lines)) if closing.match(lines[j])), None)
        body = lines[i + 1:end if end is not None else len(lines)]
        body = [line[min(indent, len(line) - len(line.lstrip(" "))):] for line in body]
        code = "\n".join(body).strip("\n")
        found.append((Block(language, code + "\n" if code else "", end is not None), i,
                      end if end is not None else len(lines) - 1))
        i = (end if end is not None else len(lines)) + 1
    return found


def fenced_blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown text, in order (CommonMark fences: ``` or ~~~, at
    least three, closed by at least as many of the same character; unclosed runs to the end)."""
    return [block for block, _, _ in _scan(text)]


def extract_code(text: str) -> tuple[str, str]:
    """(the kernel's code, the prose around it) from a code answer; ValueError if there is none."""
    text = strip_thinking(text)
    scanned = _scan(text)
    if not scanned and text.strip().startswith(("#include", "//@")):
        return text.strip() + "\n", ""
    lines = text.split("\n")
    inside = {n for _, first, last in scanned for n in range(first, last + 1)}
    prose = "\n".join(line for n, line in enumerate(lines) if n not in inside).strip()
    candidates = [b for b, _, _ in scanned if b.language in CODE_LANGUAGES and b.code.strip()]
    cut = next((b for b in candidates if not b.closed), None)
    if cut and (_KERNEL.search(cut.code) or _SOURCE.search(cut.code)):
        if not (_KERNEL.search(cut.code) and "}" in cut.code):
            raise ValueError("the last ```cuda block was never closed (the answer was cut off?) and "
                             "holds no complete kernel")
    elif cut:
        candidates.remove(cut)  # trailing notes in an open fence, not the kernel
    for marker in (_KERNEL, _SOURCE):
        chosen = [b for b in candidates if marker.search(b.code)]
        if chosen:
            return chosen[-1].code, prose
    raise ValueError("no ```cuda code block with the kernel in the answer" +
                     (" (its last block was never closed: cut off?)" if cut else ""))


_JSON_TOKEN = re.compile(r'"(?:\\.|[^"\\])*"|[{}]')
_TRAILING_COMMA = re.compile(r'("(?:\\.|[^"\\])*")|,(\s*[}\]])')


def _balanced_end(text: str, start: int, stop: int) -> int:
    """The index of the brace closing the one at `start` (braces in strings skipped), or -1."""
    depth = 0
    for token in _JSON_TOKEN.finditer(text, start, stop):
        depth += {"{": 1, "}": -1}.get(token.group(0), 0)
        if depth == 0:
            return token.start()
    return -1


def _objects(text: str, lo: int, hi: int) -> Iterator[str]:
    """Every balanced {...} span, outer before inner, lazily (an inner one is tried only when its
    outer one did not validate: `{"plan": {...}}`, or prose in braces around a plan)."""
    i = text.find("{", lo, hi)
    while i != -1:
        end = _balanced_end(text, i, hi)
        if end == -1:
            i = text.find("{", i + 1, hi)
            continue
        yield text[i:end + 1]
        yield from _objects(text, i + 1, end)
        i = text.find("{", end + 1, hi)


def _loads(candidate: str):
    # trailing commas before } or ] (outside strings) are the commonest slip
    for attempt in (candidate, _TRAILING_COMMA.sub(lambda m: m.group(1) or m.group(2), candidate)):
        try:
            return json.loads(attempt, strict=False)  # strict=False: raw newlines inside strings
        except json.JSONDecodeError:
            continue
    return None


def extract_json(text: str, schema: type[BaseModel]) -> BaseModel:
    """The first JSON object in the answer that validates against `schema`; ValueError (one line)
    naming the first validation error, or saying there was no JSON object at all."""
    text = strip_thinking(text)
    blocks = [b.code.strip() for b in fenced_blocks(text) if b.language in JSON_LANGUAGES]
    seen, errors = set(), []
    for candidate in chain(blocks, _objects(text, 0, len(text))):
        if candidate in seen:
            continue
        seen.add(candidate)
        value = _loads(candidate)
        if not isinstance(value, dict):
            continue
        try:
            return schema.model_validate(value)
        except ValidationError as exc:
            detail = exc.errors()[0]
            where = ".".join(str(part) for part in detail["loc"]) or "object"
            relevant = bool(value.keys() & schema.model_fields.keys())
            errors.append((not relevant, f"{where}: {detail['msg']} (got {repr(detail.get('input'))[:80]})"))
    if not errors:
        raise ValueError("no JSON object in the answer")
    why = min(errors, key=lambda e: e[0])[1]  # the first error of an object with the schema's keys
    raise ValueError(" ".join(f"no JSON object in the answer matches {schema.__name__}: {why}".split())[:400])


def normalise_choice(value, choices: Iterable[str]) -> str:
    """`value` as one of `choices` when it is one up to case, spaces, quotes and a final full stop
    ("Rewrite", " 'tune' ", "stop."), else lowercased and stripped, for the schema to reject by
    name (a non-string is returned as it is, likewise). Meant for a pydantic
    `field_validator(..., mode="before")`, with `typing.get_args(Action)` as the choices."""
    if not isinstance(value, str):
        return value
    cleaned = value.strip().strip("\"'`").strip().rstrip(".").strip().lower()
    return next((choice for choice in choices if choice.lower() == cleaned), cleaned)


# directive lines (kept), string and character literals (kept: they may hold "//"), comments
_TOKENS = re.compile(r"""(?m)^[ \t]*//@[^\n]*|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'"""
                     r"|//[^\n]*|/\*.*?(?:\*/|\Z)", re.DOTALL)


def _canonical(source: str) -> str:
    def keep(match: re.Match) -> str:
        token = match.group(0)
        return token if token.lstrip().startswith("//@") or token[0] in "\"'" else " "

    text = _TOKENS.sub(keep, source.replace("\r\n", "\n"))
    text = re.sub(r"\s+", " ", text).strip()
    # a space matters only between two word characters (`int x`), not around punctuation
    return re.sub(r"(?<=\W) | (?=\W)", "", text)


def same_code(a: str, b: str) -> bool:
    """True when two kernel sources differ only in whitespace and ordinary comments (`//@`
    directive lines count), so a candidate already measured is not measured again."""
    return _canonical(a) == _canonical(b)
