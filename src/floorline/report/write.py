"""write_report: results.csv, the PNG plots, report.md and index.html in one directory."""

from __future__ import annotations

from pathlib import Path

from floorline.core.errors import UserError
from floorline.report import cells, display, html, markdown, plots, sections


def write_report(records: list[dict], out_dir: str, notes: list[str] | None = None) -> list[Path]:
    """Creates out_dir; returns the files written (results.csv, the plots, report.md, index.html)."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out}: exists and is not a directory; give --out a directory")
    if not records:  # (before the folder is made: a report that fails leaves nothing behind)
        why = "; ".join((notes or [])[1:])  # (the first says how many were read: none)
        raise UserError("nothing to report: the results hold no records" + (f" ({why})" if why else ""))
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{out}: cannot make that folder ({e.strerror}); give --out a writable folder") from None
    written = []
    csv_path = out / "results.csv"
    csv_path.write_text(display.csv_text(records), encoding="utf-8")
    written.append(csv_path)
    figures = plots.write_all(cells.study_cells(records), out)
    written += [out / f.src for f in figures]
    doc = sections.document(records, figures, notes)
    for name, text in (("report.md", markdown.render(doc)), ("index.html", html.render(doc))):
        (out / name).write_text(text, encoding="utf-8")
        written.append(out / name)
    return written
