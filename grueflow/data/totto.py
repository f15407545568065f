"""ToTTo tables: the highlighted subtable with its heuristic headers, linearised as the ToTTo baseline
and RL4LMs do, and the ``[attribute, value]`` table that grueflow's PARENT metric reads.

A table is a list of rows; a cell is ``{value, is_header, column_span, row_span}``; highlighted
cells are ``[row, column]`` indices into the rows as stored (a row may hold fewer cells than the
table has columns when cells span columns). Headers follow the ToTTo baseline heuristic (Parikh et
al. 2020, google-research/language ``totto/baseline_preprocessing``): a cell's column headers are
the header cells of the rows above whose column span overlaps its own; its row headers are the
header cells before it in its row.

Every helper checks the fields it reads and raises :class:`TableError` naming the field: a cell's ``value`` is
text, ``is_header`` a boolean, ``column_span`` and ``row_span`` integers >= 1 (1 when absent); a highlighted cell is
a ``[row, column]`` pair of integers >= 0 (booleans are not integers here) naming a stored cell, since Python's
negative indices would quietly pick cells from the end of the table; titles and final sentences are text (or None).
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from grueflow.io import DataError

Table = list[list[dict[str, Any]]]


class TableError(DataError):
    """A ToTTo table, highlighted cell, title or annotation of the wrong shape; the message names the field (the
    loader adds the row)."""


def _given(value: Any) -> str:
    """``value`` as an error message shows it: its repr (cut at 60 characters) and its type."""
    text = repr(value)
    return f"{text if len(text) <= 60 else text[:60] + '...'} ({type(value).__name__})"


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_cell(cell: Any, where: str) -> None:
    """Raise a TableError unless ``cell`` is ``{value: text, is_header: bool, column_span, row_span: int >= 1}``
    (a span may be absent: 1)."""
    if not isinstance(cell, dict):
        raise TableError(f"{where} is {_given(cell)}, not a cell {{value, is_header, column_span, row_span}}")
    if not isinstance(cell.get("value"), str):
        raise TableError(f"{where}.value is {_given(cell.get('value'))}, not text")
    if not isinstance(cell.get("is_header"), bool):
        raise TableError(f"{where}.is_header is {_given(cell.get('is_header'))}, not true or false")
    for key in ("column_span", "row_span"):
        span = cell.get(key, 1)
        if not _is_integer(span) or span < 1:
            raise TableError(f"{where}.{key} is {_given(span)}, not an integer >= 1")


class HighlightedCell(NamedTuple):
    value: str
    column_headers: list[str]
    row_headers: list[str]


def column_spans(table: Table) -> list[list[tuple[int, int]]]:
    """Each cell's ``(first column, one past its last column)``, counting the column spans before it.

    Checks every cell (:func:`check_cell`): the other helpers read the table through this function."""
    if not isinstance(table, list):
        raise TableError(f"table is {_given(table)}, not a list of rows")
    spans = []
    for r, row in enumerate(table):
        if not isinstance(row, list):
            raise TableError(f"table[{r}] is {_given(row)}, not a list of cells")
        start, row_spans = 0, []
        for c, cell in enumerate(row):
            check_cell(cell, f"table[{r}][{c}]")
            end = start + cell.get("column_span", 1)
            row_spans.append((start, end))
            start = end
        spans.append(row_spans)
    return spans


def highlighted_indices(table: Table, cells: Any) -> list[list[int]]:
    """``cells`` as ``[row, column]`` pairs of integers >= 0 that name stored cells of ``table``, each once, in the
    order first given; a TableError names the first that is not.

    A cell named twice is kept once: highlighted cells are a set of cells (Parikh et al. 2020), and the baseline's
    full-table linearisation marks each once, while its subtable would write a repeated cell twice.
    """
    if not isinstance(cells, (list, tuple)):
        raise TableError(f"highlighted_cells is {_given(cells)}, not a list of [row, column] pairs")
    indices: list[list[int]] = []
    seen: set[tuple[int, int]] = set()
    for i, cell in enumerate(cells):
        pair = list(cell) if isinstance(cell, (list, tuple)) else None
        if pair is None or len(pair) != 2 or not all(_is_integer(v) and v >= 0 for v in pair):
            raise TableError(f"highlighted_cells[{i}] is {_given(cell)}, not a [row, column] pair of integers >= 0")
        r, c = pair
        if r >= len(table) or c >= len(table[r]):
            where = f"the table has {len(table)} rows" if r >= len(table) else f"row {r} has {len(table[r])} cells"
            raise TableError(f"highlighted_cells[{i}] {pair} is outside the table: {where} (indices count from 0)")
        if (r, c) not in seen:
            seen.add((r, c))
            indices.append(pair)
    return indices


def highlighted_subtable(table: Table, cells: Any) -> list[HighlightedCell]:
    """The highlighted cells in the order given (each once, :func:`highlighted_indices`), each with its heuristic
    column and row headers. A TableError names a field of the wrong shape or a cell outside the table.
    """
    spans = column_spans(table)
    subtable = []
    for r, c in highlighted_indices(table, cells):
        start, end = spans[r][c]
        column_headers = [cell["value"] for above in range(r) for cell, (s, e) in zip(table[above], spans[above])
                          if cell["is_header"] and s < end and e > start]
        row_headers = [cell["value"] for cell in table[r][:c] if cell["is_header"]]
        subtable.append(HighlightedCell(table[r][c]["value"], column_headers, row_headers))
    return subtable


def titles(page_title: Optional[str], section_title: Optional[str]) -> list[str]:
    """``<page_title> … </page_title>`` and ``<section_title> … </section_title>``, each left out when None or
    empty; a title of another type is a TableError."""
    for key, title in (("table_page_title", page_title), ("table_section_title", section_title)):
        if title is not None and not isinstance(title, str):
            raise TableError(f"{key} is {_given(title)}, not text")
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


def linearise_full_table(table: Table, cells: Any, page_title: Optional[str],
                         section_title: Optional[str]) -> str:
    """The whole table, row by row, as the ToTTo baseline's ``linearize_full_table`` (RL4LMs'
    ``representation: fulltable``): ``… <table> <row> <cell> value <col_header> … </col_header> <row_header> …
    </row_header> </cell> … </row> … </table>``, a highlighted cell written ``<highlighted_cell> …
    </highlighted_cell>``; every cell carries its heuristic headers, and titles are written as in
    :func:`linearise`."""
    spans = column_spans(table)
    highlighted = {(r, c) for r, c in highlighted_indices(table, cells)}
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
    """The annotators' final sentences, from the ToTTo files (a list of dicts) or the hub (a dict of lists); None
    (the official test split) has none, and an annotation without one is passed over. A sentence that is not text,
    or annotations of another shape, is a TableError."""
    if annotations is None:
        return []
    if isinstance(annotations, dict):
        sentences = annotations.get("final_sentence") or []
        if not isinstance(sentences, list):
            raise TableError(f"sentence_annotations.final_sentence is {_given(sentences)}, not a list of texts")
        named = [(f"sentence_annotations.final_sentence[{i}]", s) for i, s in enumerate(sentences)]
    elif isinstance(annotations, list):
        for i, annotation in enumerate(annotations):
            if not isinstance(annotation, dict):
                raise TableError(f"sentence_annotations[{i}] is {_given(annotation)}, not an annotation "
                                 f"{{final_sentence, ...}}")
        named = [(f"sentence_annotations[{i}].final_sentence", a.get("final_sentence"))
                 for i, a in enumerate(annotations)]
    else:
        raise TableError(f"sentence_annotations is {_given(annotations)}, not a list of annotations")
    for where, sentence in named:
        if sentence is not None and not isinstance(sentence, str):
            raise TableError(f"{where} is {_given(sentence)}, not text")
    return [sentence for _, sentence in named if sentence]
