"""The report as a list of plain blocks, so that report.md and index.html say the same thing from one source.

Owns the block types only; sections.py fills them, markdown.py and html.py render them.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Heading:
    level: int
    text: str


@dataclass
class Text:
    text: str


@dataclass
class Bullets:
    items: list[str]


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class Figure:
    src: str  # relative to the report directory
    alt: str
    caption: str = ""


@dataclass
class Document:
    title: str
    blocks: list = field(default_factory=list)

    def add(self, *blocks) -> None:
        self.blocks.extend(blocks)
