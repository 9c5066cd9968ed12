"""The decode modes, in the order every table, legend and help text uses. Pure data (no torch): the report and
predict read it without the measuring stack; runtimes/ holds one runtime per name here."""

MODES = ("eager", "static", "graph", "compile", "native")
