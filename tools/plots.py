"""Small SVG charts for reports: bars (speedup per shape) and lines (convergence of a search).

Reports must render on a GPU node with nothing but this package installed, and be readable in a
browser, a notebook or a GitHub page; a few dozen lines of SVG do that without a plotting
library. Values are drawn as given; the caller decides what they mean and says so in the title.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

WIDTH, HEIGHT = 720, 360
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 40, 96
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
           "#bcbd22", "#17becf")


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten apart) covering [low, high]."""
    if high <= low:
        high = low + 1.0
    raw = (high - low) / count
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.floor(low / step + 1e-9) * step
    ticks = [first]
    while ticks[-1] < high - 1e-9 * step:
        ticks.append(ticks[-1] + step)
    return ticks


def _frame(title: str, ylabel: str, xlabel: str, ticks: list[float], width: int = WIDTH) -> list[str]:
    plot_h = HEIGHT - TOP - BOTTOM
    low, high = ticks[0], ticks[-1]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{HEIGHT}" '
        f'viewBox="0 0 {width} {HEIGHT}" font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
        f'<text x="14" y="{TOP + plot_h / 2}" transform="rotate(-90 14 {TOP + plot_h / 2})" '
        f'text-anchor="middle">{escape(ylabel)}</text>',
        f'<text x="{LEFT + (width - LEFT - RIGHT) / 2}" y="{HEIGHT - 8}" text-anchor="middle">{escape(xlabel)}</text>',
    ]
    for tick in ticks:
        y = TOP + plot_h * (1 - (tick - low) / (high - low))
        parts.append(f'<line x1="{LEFT}" x2="{width - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{tick:.4g}</text>')
    return parts


def bar_chart(labels: Sequence[str], values: Sequence[float | None], *, title: str, ylabel: str,
              xlabel: str = "", reference: float | None = None) -> str:
    """One bar per label (None draws no bar); `reference` draws a dashed line, e.g. 1.0x."""
    shown = [v for v in values if v is not None] + ([reference] if reference is not None else [])
    ticks = _ticks(0.0, max(shown, default=1.0) * 1.1)
    high = ticks[-1]
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = _frame(title, ylabel, xlabel, ticks)
    slot = plot_w / max(1, len(labels))
    for i, (label, value) in enumerate(zip(labels, values)):
        x = LEFT + i * slot
        if value is not None:
            h = plot_h * value / high
            parts.append(f'<rect x="{x + slot * 0.15:.1f}" y="{TOP + plot_h - h:.1f}" width="{slot * 0.7:.1f}" '
                         f'height="{h:.1f}" fill="{COLOURS[0]}"><title>{escape(label)}: {value:.3g}</title></rect>')
            parts.append(f'<text x="{x + slot / 2:.1f}" y="{TOP + plot_h - h - 4:.1f}" '
                         f'text-anchor="middle">{value:.2f}</text>')
        cx, cy = x + slot / 2, TOP + plot_h + 12
        parts.append(f'<text x="{cx:.1f}" y="{cy:.1f}" transform="rotate(35 {cx:.1f} {cy:.1f})">{escape(label)}</text>')
    if reference is not None:
        y = TOP + plot_h * (1 - reference / high)
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
                     'stroke="black" stroke-dasharray="5,4"/>')
    return "\n".join(parts + ["</svg>"]) + "\n"


def grouped_bar_chart(labels: Sequence[str], series: Mapping[str, Sequence[float | None]], *, title: str,
                      ylabel: str, xlabel: str = "", reference: float | None = None) -> str:
    """Side-by-side bars per label, one colour per named series (None draws no bar), with a legend."""
    shown = [v for values in series.values() for v in values if v is not None]
    ticks = _ticks(0.0, max(shown + ([reference] if reference is not None else []), default=1.0) * 1.1)
    high = ticks[-1]
    width = max(WIDTH, LEFT + RIGHT + 36 * len(labels))  # a readable slot per label, however many
    plot_w, plot_h = width - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = _frame(title, ylabel, xlabel, ticks, width)
    slot = plot_w / max(1, len(labels))
    bar = slot * 0.8 / max(1, len(series))
    for i, label in enumerate(labels):
        x = LEFT + i * slot + slot * 0.1
        for j, (name, values) in enumerate(series.items()):
            value = values[i]
            if value is not None:
                h = plot_h * value / high
                parts.append(f'<rect x="{x + j * bar:.1f}" y="{TOP + plot_h - h:.1f}" width="{bar:.1f}" '
                             f'height="{h:.1f}" fill="{COLOURS[j % len(COLOURS)]}">'
                             f'<title>{escape(label)} {escape(name)}: {value:.3g}</title></rect>')
        cx, cy = LEFT + i * slot + slot / 2, TOP + plot_h + 12
        parts.append(f'<text x="{cx:.1f}" y="{cy:.1f}" font-size="9" '
                     f'transform="rotate(45 {cx:.1f} {cy:.1f})">{escape(label)}</text>')
    if reference is not None:
        y = TOP + plot_h * (1 - reference / high)
        parts.append(f'<line x1="{LEFT}" x2="{width - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
                     'stroke="black" stroke-dasharray="5,4"/>')
    for j, name in enumerate(series):
        lx = width - RIGHT - 130 * (len(series) - j)
        parts.append(f'<rect x="{lx}" y="28" width="10" height="10" fill="{COLOURS[j % len(COLOURS)]}"/>')
        parts.append(f'<text x="{lx + 14}" y="37">{escape(name)}</text>')
    return "\n".join(parts + ["</svg>"]) + "\n"


def line_chart(series: Mapping[str, Sequence[tuple[float, float]]], *, title: str, ylabel: str,
               xlabel: str) -> str:
    """One polyline per named series of (x, y) points, with a legend."""
    points = [p for line in series.values() for p in line]
    xs, ys = [p[0] for p in points] or [0.0, 1.0], [p[1] for p in points] or [0.0, 1.0]
    x_ticks = _ticks(min(xs), max(max(xs), min(xs) + 1))
    x_low, x_high = x_ticks[0], x_ticks[-1]
    y_ticks = _ticks(min(ys), max(ys) + 0.05 * (max(ys) - min(ys) or 1.0))
    y_low, y_high = y_ticks[0], y_ticks[-1]
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = _frame(title, ylabel, xlabel, y_ticks)

    def at(x: float, y: float) -> str:
        return (f"{LEFT + plot_w * (x - x_low) / (x_high - x_low):.1f},"
                f"{TOP + plot_h * (1 - (y - y_low) / (y_high - y_low)):.1f}")

    for tick in x_ticks:
        parts.append(f'<text x="{at(tick, y_low).split(",")[0]}" y="{TOP + plot_h + 14}" '
                     f'text-anchor="middle">{tick:.4g}</text>')
    for i, (name, line) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        if line:
            parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="2" '
                         f'points="{" ".join(at(x, y) for x, y in line)}"><title>{escape(name)}</title></polyline>')
        ly = TOP + plot_h + 34 + 14 * (i // 4)
        lx = LEFT + (i % 4) * 160
        parts.append(f'<rect x="{lx}" y="{ly - 9}" width="10" height="10" fill="{colour}"/>')
        parts.append(f'<text x="{lx + 14}" y="{ly}">{escape(name)}</text>')
    return "\n".join(parts + ["</svg>"]) + "\n"
