"""report.md: the document's blocks as GitHub-flavoured markdown."""

from __future__ import annotations

from floorline.report.document import Bullets, Document, Figure, Heading, Table, Text


def _cell(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def render(doc: Document) -> str:
    out = [f"# {doc.title}", ""]
    for b in doc.blocks:
        if isinstance(b, Heading):
            out += ["#" * (b.level + 1) + " " + b.text, ""]
        elif isinstance(b, Text):
            out += [b.text, ""]
        elif isinstance(b, Bullets):
            out += [f"- {_cell(i)}" for i in b.items] + [""]
        elif isinstance(b, Table):
            if b.caption:
                out += [f"*{b.caption}*", ""]
            out.append("| " + " | ".join(_cell(h) for h in b.header) + " |")
            out.append("|" + "---|" * len(b.header))
            out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in b.rows]
            out.append("")
        elif isinstance(b, Figure):
            out += [f"![{b.alt}]({b.src})", ""]
            if b.caption:
                out += [f"*{b.caption}*", ""]
        else:
            raise TypeError(f"unknown block {b!r}")
    return "\n".join(out).rstrip() + "\n"
