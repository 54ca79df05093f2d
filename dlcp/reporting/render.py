"""A small document model rendered twice: Markdown (images referenced from plots/) and one
self-contained HTML file (images embedded as base64 data URIs, styles inline: it opens alone)."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field


@dataclass
class Image:
    filename: str  # relative to the report, e.g. "plots/mct_cdf.png"
    alt: str
    png: bytes


@dataclass
class Doc:
    title: str
    blocks: list[tuple] = field(default_factory=list)
    figures: bool = True  # False: figure() draws nothing (drawing is most of a report's time)

    def h(self, text: str, level: int = 2) -> None:
        self.blocks.append(("h", level, text))

    def p(self, text: str) -> None:
        self.blocks.append(("p", text))

    def warn(self, text: str) -> None:
        self.blocks.append(("warn", text))

    def bullets(self, items: list[str]) -> None:
        if items:
            self.blocks.append(("ul", list(items)))

    def table(self, header: list[str], rows: list[list]) -> None:
        if rows:
            self.blocks.append(("table", header, [[fmt(c) for c in r] for r in rows]))

    def image(self, img: Image | None) -> None:
        if img is not None:
            self.blocks.append(("img", img))

    def figure(self, draw) -> None:
        """The Image (or None) that `draw()` returns, drawn only when the document has figures."""
        if self.figures:
            self.image(draw())

    def images(self) -> list[Image]:
        return [b[1] for b in self.blocks if b[0] == "img"]


def fmt(v, digits: int = 4) -> str:
    """Numbers for people: 4 significant digits, thousands kept whole, None as '–'."""
    if v is None:
        return "–"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if v != v:
            return "–"
        if abs(v) >= 10**digits:
            return f"{v:,.0f}"
        return f"{v:.{digits}g}"
    return str(v)


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def to_markdown(doc: Doc) -> str:
    out = [f"# {doc.title}", ""]
    for b in doc.blocks:
        kind = b[0]
        if kind == "h":
            out += ["#" * b[1] + " " + b[2], ""]
        elif kind == "p":
            out += [b[1], ""]
        elif kind == "warn":
            out += [f"> **WARNING:** {b[1]}", ""]
        elif kind == "ul":
            out += [f"- {item}" for item in b[1]] + [""]
        elif kind == "table":
            header, rows = b[1], b[2]
            out.append("| " + " | ".join(map(_md_cell, header)) + " |")
            out.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|")
            out += ["| " + " | ".join(map(_md_cell, r)) + " |" for r in rows]
            out.append("")
        elif kind == "img":
            out += [f"![{b[1].alt}]({b[1].filename})", ""]
    return "\n".join(out)


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:1150px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em;border-bottom:2px solid #ddd;padding-bottom:.2em}h2{font-size:1.25em;margin-top:1.6em;
border-bottom:1px solid #eee}h3{font-size:1.05em}
table{border-collapse:collapse;margin:.6em 0 1em;font-size:.88em}th,td{border:1px solid #ddd;padding:3px 8px}
th{background:#f4f4f4}td{text-align:right;font-variant-numeric:tabular-nums}td:first-child{text-align:left}
.warn{background:#fde8e8;border:2px solid #c62828;color:#8e0000;padding:.6em 1em;font-weight:600;margin:.8em 0}
img{max-width:100%;height:auto;display:block;margin:.5em 0 1.2em}
code{background:#f4f4f4;padding:0 3px}
"""


def _inline(text: str) -> str:
    """Escape, then turn `code` spans into <code> (the only inline markup the reports use)."""
    parts = html.escape(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def to_html(doc: Doc) -> str:
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(doc.title)}</title><style>{CSS}</style></head><body>",
        f"<h1>{html.escape(doc.title)}</h1>",
    ]
    for b in doc.blocks:
        kind = b[0]
        if kind == "h":
            out.append(f"<h{b[1]}>{_inline(b[2])}</h{b[1]}>")
        elif kind == "p":
            out.append(f"<p>{_inline(b[1])}</p>")
        elif kind == "warn":
            out.append(f'<div class="warn">WARNING: {_inline(b[1])}</div>')
        elif kind == "ul":
            out.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in b[1]) + "</ul>")
        elif kind == "table":
            out.append(
                "<table><thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in b[1]) + "</tr></thead><tbody>"
            )
            out += ["<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in b[2]]
            out.append("</tbody></table>")
        elif kind == "img":
            data = base64.b64encode(b[1].png).decode("ascii")
            out.append(
                f'<img alt="{html.escape(b[1].alt)}" title="{html.escape(b[1].filename)}" '
                f'src="data:image/png;base64,{data}">'
            )
    out.append("</body></html>")
    return "\n".join(out)
