"""A tiny SVG writer: rectangles, text, lines, polylines and circles in the order they are added.

Written by hand rather than with matplotlib, whose SVGs carry random clip-path ids, a timestamp and
font metrics of the machine that drew them. Here every coordinate is printed with at most two
decimals, attributes are in a fixed order, there are no ids, and the font is named, not measured, so
two renders of the same data are the same bytes. The generated-file header comes first (an XML comment;
no XML declaration, which would have to precede it), so `is_generated` recognises the file like a page.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

FONT_FAMILY = "DejaVu Sans Mono, Menlo, Consolas, monospace"
CHAR_WIDTH = 0.6  # advance of one monospace character, in font sizes: used to size columns


def fmt(value: float) -> str:
    """A coordinate: two decimals, trailing zeros dropped ("12", "12.5", "12.25"); never "-0"."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def text_width(text: str, size: float) -> float:
    return len(text) * size * CHAR_WIDTH


def mix(stops: list[tuple[float, tuple[int, int, int]]], t: float) -> str:
    """The colour at `t` on a piecewise-linear ramp of (position, RGB) stops, as "#rrggbb"."""
    t = min(max(t, stops[0][0]), stops[-1][0])
    for (p0, c0), (p1, c1) in itertools.pairwise(stops):
        if t <= p1:
            w = 0.0 if p1 == p0 else (t - p0) / (p1 - p0)
            return "#" + "".join(f"{round(a + (b - a) * w):02x}" for a, b in zip(c0, c1, strict=True))
    raise AssertionError("unreachable: t is clamped to the last stop")


@dataclass
class Svg:
    width: float
    height: float
    title: str
    header: str  # the generated-file comment, written as the first line
    elements: list[str] = field(default_factory=list)

    def rect(self, x: float, y: float, w: float, h: float, fill: str, stroke: str | None = None,
             tooltip: str | None = None) -> None:
        attrs = f'x="{fmt(x)}" y="{fmt(y)}" width="{fmt(w)}" height="{fmt(h)}" fill="{fill}"'
        if stroke:
            attrs += f' stroke="{stroke}" stroke-width="1"'
        if tooltip:
            self.elements.append(f"<rect {attrs}><title>{escape(tooltip)}</title></rect>")
        else:
            self.elements.append(f"<rect {attrs}/>")

    def text(self, x: float, y: float, content: str, size: float = 12, anchor: str = "start",
             fill: str = "#000000", bold: bool = False, rotate: float = 0.0) -> None:
        """`rotate`: degrees clockwise about (x, y) (-90 reads upwards)."""
        weight = ' font-weight="bold"' if bold else ""
        turn = f' transform="rotate({fmt(rotate)} {fmt(x)} {fmt(y)})"' if rotate else ""
        self.elements.append(
            f'<text x="{fmt(x)}" y="{fmt(y)}" font-size="{fmt(size)}" text-anchor="{anchor}" '
            f'fill="{fill}"{weight}{turn}>{escape(content)}</text>'
        )

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str = "#000000") -> None:
        self.elements.append(
            f'<line x1="{fmt(x1)}" y1="{fmt(y1)}" x2="{fmt(x2)}" y2="{fmt(y2)}" stroke="{stroke}" '
            'stroke-width="1"/>'
        )

    def polyline(self, points: list[tuple[float, float]], stroke: str, width: float = 2.0,
                 dashed: bool = False) -> None:
        coordinates = " ".join(f"{fmt(x)},{fmt(y)}" for x, y in points)
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        self.elements.append(
            f'<polyline points="{coordinates}" fill="none" stroke="{stroke}" stroke-width="{fmt(width)}"{dash}/>'
        )

    def circle(self, x: float, y: float, r: float, fill: str, tooltip: str | None = None) -> None:
        attrs = f'cx="{fmt(x)}" cy="{fmt(y)}" r="{fmt(r)}" fill="{fill}"'
        if tooltip:
            self.elements.append(f"<circle {attrs}><title>{escape(tooltip)}</title></circle>")
        else:
            self.elements.append(f"<circle {attrs}/>")

    def render(self) -> str:
        size = f'width="{fmt(self.width)}" height="{fmt(self.height)}"'
        view = f'viewBox="0 0 {fmt(self.width)} {fmt(self.height)}"'
        lines = [
            self.header,
            f'<svg xmlns="http://www.w3.org/2000/svg" {size} {view} font-family="{escape(FONT_FAMILY)}">',
            f"<title>{escape(self.title)}</title>",
            f'<rect x="0" y="0" width="{fmt(self.width)}" height="{fmt(self.height)}" fill="#ffffff"/>',
            *self.elements,
            "</svg>",
        ]
        return "\n".join(lines) + "\n"
