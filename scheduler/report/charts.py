"""Inline SVG charts for the HTML report: bars with error bars, a scatter, lines.

Plain SVG written here, no library and nothing fetched: the report stays one
self-contained file. Every text and attribute value is escaped; tier names
come from users' matrix files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

WIDTH, HEIGHT = 560, 320
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 16, 56
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)


@dataclass(frozen=True)
class Bar:
    label: str
    value: float | None
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class Estimate:
    """One row of an interval chart: a value with its interval, or the words saying why
    it has none (drawn beside the point, never an interval made up)."""

    label: str
    value: float | None
    low: float | None = None
    high: float | None = None
    no_interval: str | None = None


@dataclass(frozen=True)
class Point:
    label: str
    x: float
    y: float


@dataclass(frozen=True)
class Series:
    label: str
    values: Sequence[float | None]


def color(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def bar_chart(chart_id: str, title: str, bars: Sequence[Bar], y_label: str, y_max: float) -> str:
    """Vertical bars, one per label, with a [low, high] error bar where given."""
    if not any(b.value is not None for b in bars):
        return _figure(chart_id, title, _no_data())
    plot = _Plot(0.0, float(len(bars)), 0.0, y_max)
    body = [plot.y_axis(y_label)]
    slot = plot.width / len(bars)
    for i, bar in enumerate(bars):
        x = LEFT + slot * i + slot * 0.2
        body.append(_text(x + slot * 0.3, HEIGHT - BOTTOM + 16, bar.label, "middle"))
        if bar.value is None:
            continue
        top = plot.y(bar.value)
        body.append(
            f'<rect class="bar" data-label="{_attr(bar.label)}" data-value="{bar.value:.6g}" '
            f'x="{x:.1f}" y="{top:.1f}" width="{slot * 0.6:.1f}" '
            f'height="{plot.y(0) - top:.1f}" fill="{color(i)}">'
            f"<title>{escape(bar.label)}: {bar.value:.3f}</title></rect>"
        )
        if bar.low is not None and bar.high is not None:
            body.append(_error_bar(x + slot * 0.3, plot.y(bar.low), plot.y(bar.high), bar.label))
    return _figure(chart_id, title, "".join(body))


# An interval chart's height per row, and its margins for the axis below the rows.
ROW, ROWS_TOP, ROWS_BOTTOM = 28, 8, 40


# wide: a chart's parts, each named at its two callers
def interval_chart(
    chart_id: str,
    title: str,
    rows: Sequence[Estimate],
    x_label: str,
    x_range: tuple[float, float],
    width: int = WIDTH,
    notes: Sequence[str] = (),
) -> str:
    """One row per label: the value as a point, its interval as a horizontal whisker
    (clipped to `x_range`, which holds every possible value), a line at 0 when the range
    spans it; as tall as its rows. A row without an interval says so beside its point,
    and why under the chart, after `notes`."""
    if not any(r.value is not None for r in rows):
        return _figure(chart_id, title, _no_data())
    height = ROWS_TOP + ROW * len(rows) + ROWS_BOTTOM
    # Room on the left for the longest label (11 px text: about 6.5 px a character).
    left = min(width // 3, max(LEFT, 12 + round(6.5 * max(len(r.label) for r in rows))))
    sign = "+" if x_range[0] < 0 else ""  # a difference is written with its sign
    plot = _Plot(*x_range, 0.0, 1.0, (left, width - RIGHT, ROWS_TOP, height - ROWS_BOTTOM))
    body = [plot.x_axis(x_label, height=height)]
    if x_range[0] < 0 < x_range[1]:
        body.append(_line(plot.x(0), plot.top, plot.x(0), plot.bottom, "zero"))
    for i, row in enumerate(rows):
        y = ROWS_TOP + ROW * (i + 0.5)
        body.append(_text(left - 6, y + 4, row.label, "end"))
        if row.value is None:
            continue
        if row.low is not None and row.high is not None:
            body.append(_whisker(plot.x(row.low), plot.x(row.high), y, row))
        cx = plot.x(row.value)
        body.append(
            f'<circle class="estimate" data-label="{_attr(row.label)}" '
            f'data-value="{row.value:.6g}" cx="{cx:.1f}" cy="{y:.1f}" r="5" fill="{color(i)}">'
            f"<title>{escape(row.label)}: {row.value:{sign}.3f}"
            + ("" if row.low is None else f" [{row.low:{sign}.3f}, {row.high:{sign}.3f}]")
            + "</title></circle>"
        )
        if row.no_interval is not None:  # on the side of the point with room for it
            right = cx < plot.left + plot.width / 2
            body.append(
                _text(
                    cx + 9 if right else cx - 9,
                    y + 4,
                    "no interval (see below)",
                    "start" if right else "end",
                    "no-interval",
                )
            )
    missing = [f"{r.label}: no interval: {r.no_interval}" for r in rows if r.no_interval]
    return _figure(chart_id, title, "".join(body), width, height, [*notes, *missing])


def _whisker(x_low: float, x_high: float, y: float, row: Estimate) -> str:
    cap = 5
    return (
        f'<g class="interval" data-label="{_attr(row.label)}" data-low="{row.low:.6g}" '
        f'data-high="{row.high:.6g}">'
        + _line(x_low, y, x_high, y, "whisker")
        + _line(x_low, y - cap, x_low, y + cap, "whisker")
        + _line(x_high, y - cap, x_high, y + cap, "whisker")
        + "</g>"
    )


# wide: a chart's id, title, points, axes and its notes, as each chart function takes them
def scatter_chart(
    chart_id: str,
    title: str,
    points: Sequence[Point],
    x_label: str,
    y_label: str,
    y_max: float,
    notes: Sequence[str] = (),
) -> str:
    """`notes`: under the title (what is not plotted, and why)."""
    if not points:
        return _figure(chart_id, title, _no_data(), notes=notes)
    x_max = _nice_max(max(p.x for p in points))
    plot = _Plot(0.0, x_max, 0.0, y_max)
    body = [plot.y_axis(y_label), plot.x_axis(x_label)]
    for i, p in enumerate(points):
        cx, cy = plot.x(p.x), plot.y(p.y)
        body.append(
            f'<circle class="point" data-label="{_attr(p.label)}" cx="{cx:.1f}" cy="{cy:.1f}" '
            f'r="6" fill="{color(i)}"><title>{escape(p.label)}: x {p.x:.4g}, y {p.y:.3f}'
            "</title></circle>"
        )
        body.append(_text(cx + 9, cy + 4, p.label, "start"))
    return _figure(chart_id, title, "".join(body), notes=notes)


def line_chart(
    chart_id: str, title: str, series: Sequence[Series], x_label: str, y_label: str
) -> str:
    """One line per series over x = 1, 2, ...; None values leave a gap."""
    values = [v for s in series for v in s.values if v is not None]
    if not values:
        return _figure(chart_id, title, _no_data())
    longest = max(len(s.values) for s in series)
    plot = _Plot(1.0, float(max(longest, 2)), 0.0, _nice_max(max(values)))
    body = [plot.y_axis(y_label), plot.x_axis(x_label, integer=True)]
    for i, s in enumerate(series):
        points = " ".join(
            f"{plot.x(n + 1):.1f},{plot.y(v):.1f}" for n, v in enumerate(s.values) if v is not None
        )
        body.append(
            f'<polyline class="series" data-label="{_attr(s.label)}" points="{points}" '
            f'fill="none" stroke="{color(i)}" stroke-width="2"/>'
        )
        body.append(_legend(i, s.label))
    return _figure(chart_id, title, "".join(body))


class _Plot:
    """Data coordinates -> SVG coordinates inside a frame (left, right, top, bottom in
    pixels; the margins of a WIDTH x HEIGHT chart unless given). A value outside the
    axes is drawn at their edge, never outside the plot."""

    def __init__(
        self,
        x_min: float,
        x_max: float,
        y_min: float,
        y_max: float,
        frame: tuple[float, float, float, float] = (LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM),
    ):
        self.x_min, self.x_max, self.y_min, self.y_max = x_min, x_max, y_min, y_max
        self.left, right, self.top, self.bottom = frame
        self.width = right - self.left
        self.height = self.bottom - self.top

    def x(self, value: float) -> float:
        clamped = min(max(value, self.x_min), self.x_max)
        return self.left + (clamped - self.x_min) / (self.x_max - self.x_min) * self.width

    def y(self, value: float) -> float:
        clamped = min(max(value, self.y_min), self.y_max)
        return self.bottom - (clamped - self.y_min) / (self.y_max - self.y_min) * self.height

    def y_axis(self, label: str) -> str:
        parts = [_line(self.left, self.top, self.left, self.bottom, "axis")]
        for tick in _ticks(self.y_max):
            y = self.y(tick)
            parts.append(_line(self.left, y, self.left + self.width, y, "grid"))
            parts.append(_text(self.left - 6, y + 4, _tick_label(tick), "end"))
        parts.append(
            f'<text class="axis-label" transform="translate(14 {self.top + self.height / 2:.0f}) '
            f'rotate(-90)" text-anchor="middle">{escape(label)}</text>'
        )
        return "".join(parts)

    def x_axis(self, label: str, integer: bool = False, height: int = HEIGHT) -> str:
        y = self.bottom
        parts = [_line(self.left, y, self.left + self.width, y, "axis")]
        if integer:
            ticks = [float(n) for n in range(int(self.x_min), int(self.x_max) + 1)]
        elif self.x_min < 0:  # a symmetric range of differences: ticks each side of 0
            ticks = [-t for t in reversed(_ticks(-self.x_min)[1:])] + _ticks(self.x_max)
        else:
            ticks = _ticks(self.x_max)
        step = max(1, math.ceil(len(ticks) / 12))  # at most ~12 labels
        for tick in ticks[::step]:
            parts.append(_text(self.x(tick), y + 16, _tick_label(tick), "middle"))
        parts.append(_text(self.left + self.width / 2, height - 8, label, "middle", "axis-label"))
        return "".join(parts)


def _ticks(maximum: float) -> list[float]:
    step = _nice_step(maximum / 5)
    count = round(maximum / step)
    return [step * i for i in range(count + 1)]


def _nice_step(raw: float) -> float:
    # int ** int is typed Any (a negative power is a float); an int above 1 stays one,
    # so that the ticks read 100, not 100.0.
    magnitude: float = 10 ** math.floor(math.log10(raw))
    return next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)


def _nice_max(value: float) -> float:
    """A round upper bound a little above `value` (at least a tiny positive one)."""
    if value <= 0:
        return 1.0
    step = _nice_step(value * 1.1 / 5)
    return step * math.ceil(value * 1.1 / step)


def _tick_label(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.4g}"


def _error_bar(x: float, y_low: float, y_high: float, label: str) -> str:
    cap = 6
    return (
        f'<g class="error-bar" data-label="{_attr(label)}">'
        + _line(x, y_low, x, y_high, "whisker")
        + _line(x - cap, y_low, x + cap, y_low, "whisker")
        + _line(x - cap, y_high, x + cap, y_high, "whisker")
        + "</g>"
    )


def _legend(index: int, label: str) -> str:
    x, y = LEFT + 8 + (index % 4) * 120, TOP + 12 + (index // 4) * 16
    return (
        f'<g class="legend"><rect x="{x}" y="{y - 9}" width="10" height="10" '
        f'fill="{color(index)}"/>{_text(x + 14, y, label, "start")}</g>'
    )


def _line(x1: float, y1: float, x2: float, y2: float, css: str) -> str:
    return f'<line class="{css}" x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}"/>'


def _text(x: float, y: float, text: str, anchor: str, css: str = "tick") -> str:
    return (
        f'<text class="{css}" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}">{escape(text)}</text>'
    )


def _no_data() -> str:
    return _text(WIDTH / 2, HEIGHT / 2, "no data", "middle", "no-data")


def _attr(value: str) -> str:
    return escape(value, quote=True)


def _figure(
    chart_id: str,
    title: str,
    body: str,
    width: int = WIDTH,
    height: int = HEIGHT,
    notes: Sequence[str] = (),
) -> str:
    listed = "".join(f"<li>{escape(n)}</li>" for n in notes)
    return (
        f'<figure class="chart" id="{_attr(chart_id)}">'
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" role="img" aria-label="{_attr(title)}">'
        f"<title>{escape(title)}</title>{body}</svg>"
        f"<figcaption>{escape(title)}"
        + (f'<ul class="notes">{listed}</ul>' if listed else "")
        + "</figcaption></figure>"
    )
