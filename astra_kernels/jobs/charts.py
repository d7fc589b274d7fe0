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


def _tick_text(value: float) -> str:
    """A tick's label: whole numbers written out (10000, not 1e+04), others to four figures."""
    return str(int(value)) if value >= 1 and value == int(value) else f"{value:.4g}"


def _frame(title: str, ylabel: str, xlabel: str, ticks: list[float], width: int = WIDTH,
           positions: list[float] | None = None) -> list[str]:
    """The canvas, title, axis labels and the y ticks' grid; `positions` places the ticks where they
    are not their values (a log axis: their logarithms)."""
    plot_h = HEIGHT - TOP - BOTTOM
    positions = positions or ticks
    low, high = positions[0], positions[-1]
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{HEIGHT}" '
        f'viewBox="0 0 {width} {HEIGHT}" font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">{escape(title)}</text>',
        f'<text x="14" y="{TOP + plot_h / 2}" transform="rotate(-90 14 {TOP + plot_h / 2})" '
        f'text-anchor="middle">{escape(ylabel)}</text>',
        f'<text x="{LEFT + (width - LEFT - RIGHT) / 2}" y="{HEIGHT - 8}" text-anchor="middle">{escape(xlabel)}</text>',
    ]
    for tick, position in zip(ticks, positions):
        y = TOP + plot_h * (1 - (position - low) / (high - low))
        parts.append(f'<line x1="{LEFT}" x2="{width - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{_tick_text(tick)}</text>')
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
        # Hung down-left from the bar's foot, so the last label stays inside the canvas.
        cx, cy = x + slot / 2 + 4, TOP + plot_h + 12
        parts.append(f'<text x="{cx:.1f}" y="{cy:.1f}" text-anchor="end" '
                     f'transform="rotate(-35 {cx:.1f} {cy:.1f})">{escape(label)}</text>')
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
               xlabel: str, log_x: bool = False, log_y: bool = False) -> str:
    """One polyline per named series of (x, y) points, with a legend; a log axis (values > 0) for
    quantities that span decades (tokens 1 to 16384, microseconds 2 to 2000), ticked in its units."""
    points = [p for line in series.values() for p in line if (not log_x or p[0] > 0) and (not log_y or p[1] > 0)]
    series = {name: [p for p in line if (not log_x or p[0] > 0) and (not log_y or p[1] > 0)]
              for name, line in series.items()}
    xs, ys = [p[0] for p in points] or [1.0, 10.0], [p[1] for p in points] or [1.0, 10.0]
    x_ticks = _log_ticks(min(xs), max(xs)) if log_x else _ticks(min(xs), max(max(xs), min(xs) + 1))
    y_ticks = (_log_ticks(min(ys), max(ys)) if log_y else
               _ticks(min(ys), max(ys) + 0.05 * (max(ys) - min(ys) or 1.0)))
    to_x, to_y = (math.log10 if log_x else float), (math.log10 if log_y else float)
    x_low, x_high = to_x(x_ticks[0]), to_x(x_ticks[-1])
    y_low, y_high = to_y(y_ticks[0]), to_y(y_ticks[-1])
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = _frame(title, ylabel, xlabel, y_ticks, positions=[to_y(t) for t in y_ticks] if log_y else None)

    def at(x: float, y: float) -> str:
        return (f"{LEFT + plot_w * (to_x(x) - x_low) / (x_high - x_low):.1f},"
                f"{TOP + plot_h * (1 - (to_y(y) - y_low) / (y_high - y_low)):.1f}")

    for tick in x_ticks:
        parts.append(f'<text x="{at(tick, y_ticks[0]).split(",")[0]}" y="{TOP + plot_h + 14}" '
                     f'text-anchor="middle">{_tick_text(tick)}</text>')
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


def _log_ticks(low: float, high: float) -> list[float]:
    """Powers of ten covering [low, high] (both > 0), at least one decade apart."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    return [10.0 ** e for e in range(first, max(last, first + 1) + 1)]


def scatter_chart(series: Mapping[str, Sequence[tuple[float, float]]], *, title: str, ylabel: str, xlabel: str,
                  log_x: bool = False, x_format=None, reference: float | None = None, reference_label: str = "",
                  links: Sequence[tuple[float, float, float, float]] = (),
                  notes: Sequence[tuple[float, float, str]] = ()) -> str:
    """Points per named series, with a legend; `links` joins pairs of points (x1, y1, x2, y2) with a
    thin line, `notes` writes a short label beside a point, `reference` draws a labelled dashed
    horizontal line (a ceiling). A log x axis spreads sizes that span decades."""
    x_format = x_format or (lambda v: f"{v:.4g}")
    points = [p for line in series.values() for p in line]
    xs = [p[0] for p in points if not log_x or p[0] > 0] or [1.0, 10.0]
    ys = [p[1] for p in points] + ([reference] if reference is not None else [])
    y_ticks = _ticks(0.0, max(ys, default=1.0) * 1.08, count=6)
    y_high = y_ticks[-1]
    if log_x:
        x_ticks = _log_ticks(min(xs), max(xs))
        to_x = math.log10
    else:
        x_ticks = _ticks(min(xs), max(max(xs), min(xs) + 1))
        to_x = float
    x_low, x_high = to_x(x_ticks[0]), to_x(x_ticks[-1])
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    parts = _frame(title, ylabel, xlabel, y_ticks)

    def px(x: float) -> float:
        return LEFT + plot_w * (to_x(x) - x_low) / (x_high - x_low)

    def py(y: float) -> float:
        return TOP + plot_h * (1 - y / y_high)

    for tick in x_ticks:
        text = x_format(tick)
        # The last tick sits on the right edge: its label ends there instead of running off the canvas.
        at, anchor = (px(tick), "middle") if px(tick) + 3 * len(text) < WIDTH - 2 else (WIDTH - 2, "end")
        parts.append(f'<line x1="{px(tick):.1f}" x2="{px(tick):.1f}" y1="{TOP}" y2="{TOP + plot_h}" stroke="#eee"/>')
        parts.append(f'<text x="{at:.1f}" y="{TOP + plot_h + 14}" text-anchor="{anchor}">{escape(text)}</text>')
    if reference is not None:
        parts.append(f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{py(reference):.1f}" y2="{py(reference):.1f}" '
                     'stroke="black" stroke-dasharray="5,4"/>')
        parts.append(f'<text x="{LEFT + 4}" y="{py(reference) - 5:.1f}">{escape(reference_label)}</text>')
    for x1, y1, x2, y2 in links:
        parts.append(f'<line x1="{px(x1):.1f}" y1="{py(y1):.1f}" x2="{px(x2):.1f}" y2="{py(y2):.1f}" stroke="#999"/>')
    for i, (name, line) in enumerate(series.items()):
        colour = COLOURS[i % len(COLOURS)]
        for x, y in line:
            parts.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="4" fill="{colour}">'
                         f'<title>{escape(name)}: {escape(x_format(x))}, {y:.3g}</title></circle>')
        lx = LEFT + (i % 4) * 160
        ly = TOP + plot_h + 34 + 14 * (i // 4)
        parts.append(f'<circle cx="{lx + 5}" cy="{ly - 4}" r="4" fill="{colour}"/>')
        parts.append(f'<text x="{lx + 14}" y="{ly}">{escape(name)}</text>')
    # Labels keep clear of every point (with a 2-px margin) and of each other.
    placed = [(px(x) - 6, py(y) - 6, px(x) + 6, py(y) + 6) for x, y in points]
    if reference is not None:  # the ceiling's own label, above the left end of its line
        placed.append((LEFT + 4, py(reference) - 14, LEFT + 4 + 6.2 * len(reference_label), py(reference)))
    for x, y, text in notes:
        parts.append(_note(px(x), py(y), text, placed, (LEFT, TOP, WIDTH - RIGHT, TOP + plot_h)))
    return "\n".join(parts + ["</svg>"]) + "\n"


NOTE_CHAR_W = 5.7  # a generous average width of a 9-px sans-serif character, so labels never touch


def _note(x: float, y: float, text: str, placed: list, bounds: tuple[float, float, float, float]) -> str:
    """A 9-px label beside the point (x, y): the first spot, nearest first, that stays inside
    `bounds` and clear of the boxes `placed` so far (which it joins), else the spot that overlaps
    them least. A label pushed away from its point gets a leader line, so no one reads it as its
    neighbour's."""
    w, h = NOTE_CHAR_W * len(text), 9.0
    spots = [(dx, dy) for dy in (-5, 12, -16, 23, -27, 34, -38, 45) for dx in (6, -6 - w)]
    boxes = [(x + dx, y + dy - h, x + dx + w, y + dy) for dx, dy in spots]

    def overlap(box) -> float:
        outside = not (box[0] >= bounds[0] and box[1] >= bounds[1] and box[2] <= bounds[2] and box[3] <= bounds[3])
        covered = sum(max(0.0, min(box[2], b[2]) - max(box[0], b[0])) * max(0.0, min(box[3], b[3]) - max(box[1], b[1]))
                      for b in placed)
        return covered + (1e9 if outside else 0.0)

    spot = next((i for i, b in enumerate(boxes) if overlap(b) == 0.0), None)
    if spot is None:
        spot = min(range(len(boxes)), key=lambda i: overlap(boxes[i]))
    box = boxes[spot]
    placed.append(box)
    label = f'<text x="{box[0]:.1f}" y="{box[3]:.1f}" font-size="9">{escape(text)}</text>'
    if spot == 0:
        return label
    ex = box[0] if box[0] > x else box[2]  # the label's near end, at its middle height
    return f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{ex:.1f}" y2="{box[3] - h / 2:.1f}" stroke="#999"/>\n' + label


PANEL_W, PANEL_H = 240, 170
PANEL_LEFT, PANEL_RIGHT, PANEL_TOP, PANEL_BOTTOM = 48, 12, 24, 30


def step_panels(panels: Sequence[tuple[str, Sequence[tuple[float, float]], float | None]], *, title: str,
                ylabel: str, xlabel: str, line_label: str, reference_label: str, columns: int = 4,
                clip: float = 2.0, empty_label: str = "nothing to draw") -> str:
    """Small multiples, one panel per (title, points, reference): each its own y scale, so a
    2 us shape and a 200 us shape are both readable. Points are (count, value) pairs from count 1,
    drawn as a step line with each value over (count - 1, count], the reference as a dashed line.
    Values above `clip` times the larger of the last point and the reference are drawn at the
    panel's top edge, so one wild first guess does not flatten the rest."""
    rows = max(1, math.ceil(len(panels) / columns))
    width = max(WIDTH, PANEL_W * min(columns, max(1, len(panels))))  # room for the title and legend
    height = 52 + rows * PANEL_H + 18
    parts = [
        (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
         f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="10">'),
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="18" text-anchor="middle" font-size="14">{escape(title)}</text>',
        f'<line x1="12" x2="36" y1="36" y2="36" stroke="{COLOURS[0]}" stroke-width="2"/>',
        f'<text x="40" y="40">{escape(line_label)}</text>',
        f'<line x1="{width / 2}" x2="{width / 2 + 24}" y1="36" y2="36" stroke="black" stroke-dasharray="5,4"/>',
        f'<text x="{width / 2 + 28}" y="40">{escape(reference_label)}</text>',
        f'<text x="{width / 2}" y="{height - 6}" text-anchor="middle">{escape(xlabel)}; y: {escape(ylabel)}</text>',
    ]
    inner_w, inner_h = PANEL_W - PANEL_LEFT - PANEL_RIGHT, PANEL_H - PANEL_TOP - PANEL_BOTTOM
    for n, (name, points, reference) in enumerate(panels):
        ox, oy = (n % columns) * PANEL_W, 52 + (n // columns) * PANEL_H
        parts.append(f'<text x="{ox + PANEL_LEFT + inner_w / 2}" y="{oy + 14}" text-anchor="middle" '
                     f'font-size="11">{escape(name)}</text>')
        ys = [y for _, y in points] + ([reference] if reference is not None else [])
        if not ys:
            parts.append(f'<text x="{ox + PANEL_LEFT + inner_w / 2}" y="{oy + PANEL_TOP + inner_h / 2}" '
                         f'text-anchor="middle" fill="#777">{escape(empty_label)}</text>')
            continue
        cap = clip * max(points[-1][1] if points else 0.0, reference or 0.0)
        y_ticks = _ticks(min(ys), min(max(ys), cap), count=3)
        y_low, y_high = y_ticks[0], y_ticks[-1]
        x_max = max([x for x, _ in points] + [1.0])
        x_ticks = [t for t in _ticks(0.0, x_max, count=3) if t <= x_max] or [0.0]

        def px(x: float, ox=ox, x_max=x_max) -> float:
            return ox + PANEL_LEFT + inner_w * x / x_max

        def py(y: float, oy=oy, y_low=y_low, y_high=y_high) -> float:
            y = min(max(y, y_low), y_high)
            return oy + PANEL_TOP + inner_h * (1 - (y - y_low) / (y_high - y_low))

        parts.append(f'<rect x="{ox + PANEL_LEFT}" y="{oy + PANEL_TOP}" width="{inner_w}" height="{inner_h}" '
                     'fill="none" stroke="#ccc"/>')
        for tick in y_ticks:
            parts.append(f'<line x1="{ox + PANEL_LEFT}" x2="{ox + PANEL_LEFT + inner_w}" y1="{py(tick):.1f}" '
                         f'y2="{py(tick):.1f}" stroke="#eee"/>')
            parts.append(f'<text x="{ox + PANEL_LEFT - 4}" y="{py(tick) + 3:.1f}" text-anchor="end">{tick:.4g}</text>')
        for tick in x_ticks:
            parts.append(f'<text x="{px(tick):.1f}" y="{oy + PANEL_TOP + inner_h + 12}" '
                         f'text-anchor="middle">{tick:.4g}</text>')
        if reference is not None:
            parts.append(f'<line x1="{ox + PANEL_LEFT}" x2="{ox + PANEL_LEFT + inner_w}" y1="{py(reference):.1f}" '
                         f'y2="{py(reference):.1f}" stroke="black" stroke-dasharray="5,4">'
                         f'<title>{escape(reference_label)}: {reference:.4g}</title></line>')
        if not points:
            parts.append(f'<text x="{ox + PANEL_LEFT + inner_w / 2}" y="{oy + PANEL_TOP + inner_h / 3}" '
                         f'text-anchor="middle" fill="#777">{escape(empty_label)}</text>')
        else:
            # The value after point i is drawn over (x[i] - 1, x[i]], so the last one shows too.
            first_x, first_y = points[0]
            path = [f"M{px(first_x - 1):.1f},{py(first_y):.1f}H{px(first_x):.1f}"]
            for x, y in points[1:]:
                path.append(f"V{py(y):.1f}H{px(x):.1f}")
            parts.append(f'<path d="{"".join(path)}" fill="none" stroke="{COLOURS[0]}" stroke-width="2">'
                         f'<title>{escape(name)}: {points[-1][1]:.4g} after {points[-1][0]:.0f}</title></path>')
    return "\n".join(parts + ["</svg>"]) + "\n"
