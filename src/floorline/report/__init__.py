"""floorline report: merge JSON-lines results from many machines into tables (report.md, index.html), a flat
results.csv and PNG plots.

    records, notes = load_results(["l4.jsonl", "h100.jsonl"])
    files = write_report(records, "report/", notes)

load.py merges, cells.py groups, sections.py writes the content, markdown.py / html.py render it, plots.py draws,
write.py puts it all in one directory.
"""

from floorline.report.load import load_results
from floorline.report.write import write_report

__all__ = ["load_results", "write_report"]
