"""index.html: the same blocks as report.md, as one plain HTML page (no scripts, nothing fetched from the network)."""

from __future__ import annotations

from html import escape

from floorline.report.document import Bullets, Document, Figure, Heading, Table, Text

STYLE = """
body { font-family: sans-serif; margin: 2em auto; max-width: 78em; padding: 0 1em; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; }
td:first-child, th:first-child { text-align: left; }
caption { caption-side: top; text-align: left; font-style: italic; padding-bottom: 0.3em; }
figure { margin: 1em 0 2em; }
figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-style: italic; font-size: 0.9em; }
"""


def render(doc: Document) -> str:
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           f"<title>{escape(doc.title)}</title>", f"<style>{STYLE}</style>", "</head>", "<body>",
           f"<h1>{escape(doc.title)}</h1>"]
    for b in doc.blocks:
        if isinstance(b, Heading):
            n = min(b.level + 1, 6)
            out.append(f"<h{n}>{escape(b.text)}</h{n}>")
        elif isinstance(b, Text):
            out.append(f"<p>{escape(b.text)}</p>")
        elif isinstance(b, Bullets):
            out.append("<ul>" + "".join(f"<li>{escape(str(i))}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            out.append("<table>")
            if b.caption:
                out.append(f"<caption>{escape(b.caption)}</caption>")
            out.append("<tr>" + "".join(f"<th>{escape(str(h))}</th>" for h in b.header) + "</tr>")
            out += ["<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in b.rows]
            out.append("</table>")
        elif isinstance(b, Figure):
            cap = f"<figcaption>{escape(b.caption)}</figcaption>" if b.caption else ""
            out.append(f'<figure><img src="{escape(b.src)}" alt="{escape(b.alt)}">{cap}</figure>')
        else:
            raise TypeError(f"unknown block {b!r}")
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"
