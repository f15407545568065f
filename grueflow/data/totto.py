"""ToTTo tables: the highlighted subtable with its heuristic headers, linearised as the ToTTo baseline
and RL4LMs do, and the ``[attribute, value]`` table that grueflow's PARENT metric reads.

A table is a list of rows; a cell is ``{value, is_header, column_span, row_span}``; highlighted
cells are ``[row, column]`` indices into the rows as stored (a row may hold fewer cells than the
table has columns when cells span columns). Headers follow the ToTTo baseline heuristic (Parikh et
al. 2020, google-research/language ``totto/baseline_preprocessing``): a cell's column headers are
the header cells of the rows above whose column span overlaps its own; its row headers are the
header cells before it in its row.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

Table = list[list[dict[str, Any]]]


class HighlightedCell(NamedTuple):
    value: str
    column_headers: list[str]
    row_headers: list[str]


def column_spans(table: Table) -> list[list[tuple[int, int]]]:
    """Each cell's ``(first column, one past its last column)``, counting the column spans before it."""
    spans = []
    for row in table:
        start, row_spans = 0, []
        for cell in row:
            end = start + int(cell.get("column_span", 1))
            row_spans.append((start, end))
            start = end
        spans.append(row_spans)
    return spans


def highlighted_subtable(table: Table, cells: list[list[int]]) -> list[HighlightedCell]:
    """The highlighted cells in the order given, each with its heuristic column and row headers.

    Raises ``IndexError`` for a cell index outside the table.
    """
    spans = column_spans(table)
    subtable = []
    for r, c in cells:
        start, end = spans[r][c]
        column_headers = [cell["value"] for above in range(r) for cell, (s, e) in zip(table[above], spans[above])
                          if cell["is_header"] and s < end and e > start]
        row_headers = [cell["value"] for cell in table[r][:c] if cell["is_header"]]
        subtable.append(HighlightedCell(table[r][c]["value"], column_headers, row_headers))
    return subtable


def titles(page_title: Optional[str], section_title: Optional[str]) -> list[str]:
    """``<page_title> … </page_title>`` and ``<section_title> … </section_title>``, each left out when None or
    empty."""
    return ([f"<page_title> {page_title} </page_title>"] if page_title else []) + \
        ([f"<section_title> {section_title} </section_title>"] if section_title else [])


def linearise(subtable: list[HighlightedCell], page_title: Optional[str], section_title: Optional[str]) -> str:
    """``<page_title> … </page_title> <section_title> … </section_title> <table> <cell> value
    <col_header> … </col_header> <row_header> … </row_header> </cell> … </table>``; a title left out
    (None or empty) is not written."""
    parts = titles(page_title, section_title) + ["<table>"]
    for cell in subtable:
        parts.append(f"<cell> {cell.value}")
        parts.extend(f"<col_header> {h} </col_header>" for h in cell.column_headers)
        parts.extend(f"<row_header> {h} </row_header>" for h in cell.row_headers)
        parts.append("</cell>")
    parts.append("</table>")
    return " ".join(parts)


def linearise_full_table(table: Table, cells: list[list[int]], page_title: Optional[str],
                         section_title: Optional[str]) -> str:
    """The whole table, row by row, as the ToTTo baseline's ``linearize_full_table`` (RL4LMs'
    ``representation: fulltable``): ``… <table> <row> <cell> value <col_header> … </col_header> <row_header> …
    </row_header> </cell> … </row> … </table>``, a highlighted cell written ``<highlighted_cell> …
    </highlighted_cell>``; every cell carries its heuristic headers, and titles are written as in
    :func:`linearise`."""
    spans = column_spans(table)
    highlighted = {(r, c) for r, c in cells}
    parts = titles(page_title, section_title) + ["<table>"]
    for r, row in enumerate(table):
        parts.append("<row>")
        for c, cell in enumerate(row):
            start, end = spans[r][c]
            marker = "highlighted_cell" if (r, c) in highlighted else "cell"
            parts.append(f"<{marker}> {cell['value']}")
            parts.extend(f"<col_header> {above['value']} </col_header>" for a in range(r)
                         for above, (s, e) in zip(table[a], spans[a]) if above["is_header"] and s < end and e > start)
            parts.extend(f"<row_header> {before['value']} </row_header>" for before in row[:c] if before["is_header"])
            parts.append(f"</{marker}>")
        parts.append("</row>")
    parts.append("</table>")
    return " ".join(parts)


def parent_table(subtable: list[HighlightedCell], page_title: Optional[str],
                 section_title: Optional[str]) -> list[list[str]]:
    """``meta['table']`` for PARENT: ``[headers, value]`` per highlighted cell, then the titles.

    This is the table the official ToTTo evaluation gives PARENT for recall (the highlighted cells
    plus ``page_title`` and ``section_title``); a cell without headers gets the attribute ``cell``.
    PARENT scores values only; the attributes are for people reading the datapool.
    """
    table = [[" ".join(cell.column_headers + cell.row_headers) or "cell", cell.value]
             for cell in subtable if cell.value.strip()]
    table += [[name, title] for name, title in (("page_title", page_title), ("section_title", section_title)) if title]
    return table


def final_sentences(annotations: Any) -> list[str]:
    """The annotators' final sentences, from the ToTTo files (a list of dicts) or the hub (a dict of lists)."""
    if isinstance(annotations, dict):
        return list(annotations.get("final_sentence") or [])
    return [a["final_sentence"] for a in annotations or [] if a.get("final_sentence")]
