"""Excel (.xlsx, .xls) and OpenDocument spreadsheets (.ods) as text with provenance: one unit
per sheet, rows as tab-separated lines, streamed in blocks of ROWS_PER_PART rows so a large
sheet is never held whole.

The package checks and the OpenDocument walk are shared with the other families in office.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

from .base import Part, Place, ReadContext, printable, short_reason, unreadable
from .office import (
    DAMAGED_HINT,
    ELEMENT,
    ENCRYPTED_HINT,
    OFFICE,
    OLE,
    TABLE,
    TEXT,
    Discard,
    Odf,
    cell_text,
    check_package,
    load_odf,
    odf_cells,
    odf_elements,
    odf_rows,
    ole_streams,
    one_line,
    unit_label,
    what_of,
)

# Rows per part of a streamed sheet: the rest of a sheet follows in `joined` parts, so a sheet
# of millions of rows costs the memory of one block.
ROWS_PER_PART = 2000

# The most rows a sheet has in Excel and LibreOffice (MAX_COLUMNS, in office, is the most
# columns). An OpenDocument row may say it repeats a million times; past this bound the file
# is not a real sheet.
MAX_ROWS = 1_048_576


# --------------------------------------------------------------------------------------------
# Spreadsheets: rows as tab-separated lines


def _row_line(values: Iterable[object]) -> str:
    cells = [cell_text(v) for v in values]
    while cells and not cells[-1].strip():
        cells.pop()
    return "\t".join(cells)


def _sheet_parts(name: str, number: int, lines: Iterable[str]) -> Iterator[Part]:
    """A sheet as parts: "Sheet: NAME" and the first ROWS_PER_PART rows, then each further block
    of rows as a `joined` part starting with a newline. Empty rows are skipped; a sheet with no
    rows yields nothing."""
    place = Place("sheet", number, unit_label(name))
    batch: list[str] = []
    first = True
    for line in lines:
        if not line.strip():
            continue
        batch.append(line)
        if len(batch) >= ROWS_PER_PART:
            yield _sheet_block(name, place, batch, first)
            first, batch = False, []
    if batch:
        yield _sheet_block(name, place, batch, first)


def _sheet_block(name: str, place: Place, batch: list[str], first: bool) -> Part:
    head = f"Sheet: {one_line(printable(name))}\n" if first else "\n"
    return Part(head + "\n".join(batch), place, joined=not first)


def read_xlsx(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    """An Excel workbook's sheets, streamed: formulas give the values Excel saved with them."""
    head = file.read(len(OLE))
    file.seek(0)
    if head == OLE and {"workbook", "book"} & (ole_streams(file) or set()):
        yield from read_xls(file, context)  # an .xls file named .xlsx
        return
    # Worksheets are streamed row by row in read-only mode, so only the other parts are bounded.
    check_package(file, context, "xlsx", streamed=lambda name: name.startswith("xl/worksheets/"))
    import openpyxl  # type: ignore[import-untyped]

    # openpyxl warns (on stderr) about every workbook feature it does not keep, such as data
    # validation or conditional formatting, none of which matters to the text.
    warnings.filterwarnings("ignore", category=UserWarning, module=r"openpyxl\.")
    try:
        workbook = openpyxl.load_workbook(file, read_only=True, data_only=True, keep_links=False)
    except Exception as exc:  # openpyxl raises KeyError, InvalidFileException, XML errors…
        raise unreadable(context.title, what_of("xlsx"), short_reason(exc), DAMAGED_HINT) from exc
    try:
        for number, name in enumerate(workbook.sheetnames, 1):
            try:
                sheet: Any = workbook[name]
                if not hasattr(sheet, "iter_rows"):
                    continue  # a chart sheet
                # The saved dimensions are often wrong ("A1:XFD1048576"); without them each row
                # is as long as its last cell, not padded to the dimension's width.
                sheet.reset_dimensions()
                yield from _sheet_parts(name, number, (_row_line(row) for row in sheet.iter_rows(values_only=True)))
            except Exception as exc:  # a damaged sheet loses that sheet (or its rest)
                context.warn(f"{context.title}: sheet {number} ({unit_label(name)}) could not be read ({short_reason(exc)})")
    finally:
        workbook.close()


def read_xls(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    """An Excel 97-2003 workbook's sheets, with the values saved for formulas and dates
    converted with the workbook's date system (1900 or 1904)."""
    import xlrd  # type: ignore[import-untyped]

    head = file.read(4)
    file.seek(0)
    if head == b"PK\x03\x04":
        yield from read_xlsx(file, context)  # an .xlsx file named .xls
        return
    what = what_of("xls")
    log = Discard()
    with _mapped(file) as contents:
        try:
            book = xlrd.open_workbook(file_contents=contents, on_demand=True, logfile=log, ragged_rows=True)
        except Exception as exc:  # xlrd raises XLRDError, CompDocError, struct.error…
            reason = short_reason(exc)
            # FILEPASS in a BIFF file, or an encrypted .xlsx (EncryptedPackage) named .xls
            if "encrypted" in reason.lower() or "encryptedpackage" in (ole_streams(file) or set()):
                raise unreadable(context.title, what, "it is password-protected", ENCRYPTED_HINT) from exc
            raise unreadable(context.title, what, reason, DAMAGED_HINT) from exc
        try:
            for index, name in enumerate(book.sheet_names()):
                try:
                    sheet = book.sheet_by_index(index)
                    lines = (_row_line(_xls_values(sheet.row(r), book.datemode)) for r in range(sheet.nrows))
                    yield from _sheet_parts(name, index + 1, lines)
                except Exception as exc:  # a damaged sheet loses that sheet
                    context.warn(
                        f"{context.title}: sheet {index + 1} ({unit_label(name)}) could not be read ({short_reason(exc)})"
                    )
                finally:
                    book.unload_sheet(index)
        finally:
            book.release_resources()


@contextlib.contextmanager
def _mapped(file: BinaryIO) -> Iterator[Any]:
    """The file's bytes for xlrd: mapped from disk when it is a real file (the pages are read as
    needed and shared with the OS cache), else read whole (an archive member in memory)."""
    import io
    import mmap

    mapped = None
    if isinstance(file, (io.BufferedReader, io.FileIO)):  # not a temporary file, which would be written to disk
        with contextlib.suppress(OSError, ValueError):
            mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    if mapped is None:
        yield file.read()
        return
    try:
        yield mapped
    finally:
        mapped.close()


def _xls_values(cells: list[Any], datemode: int) -> Iterator[object]:
    import xlrd

    for cell in cells:
        kind = cell.ctype
        if kind == xlrd.XL_CELL_DATE:
            yield _xls_date(cell.value, datemode)
        elif kind == xlrd.XL_CELL_BOOLEAN:
            yield bool(cell.value)
        elif kind == xlrd.XL_CELL_ERROR:
            yield xlrd.error_text_from_code.get(cell.value, "#ERROR")
        elif kind in (xlrd.XL_CELL_EMPTY, xlrd.XL_CELL_BLANK):
            yield None
        else:
            yield cell.value


def _xls_date(value: float, datemode: int) -> object:
    import xlrd

    try:
        when = xlrd.xldate.xldate_as_datetime(value, datemode)
    except (ValueError, OverflowError, xlrd.xldate.XLDateError):
        return value
    if value < 1:  # a time of day without a date
        return when.time()
    return when


def read_ods(file: BinaryIO, context: ReadContext) -> Iterator[Part]:
    """An OpenDocument spreadsheet's sheets: values as saved (dates as ISO), repeated cells and
    rows expanded only where they hold something."""
    document = load_odf(file, context, "ods")
    body = getattr(document, "spreadsheet", None)
    if body is None:
        raise unreadable(context.title, what_of("ods"), "it holds no sheets (another OpenDocument kind?)", DAMAGED_HINT)
    tables = [t for t in body.childNodes if t.nodeType == ELEMENT and t.qname == (TABLE, "table")]
    for number, table in enumerate(tables, 1):
        name = table.getAttrNS(TABLE, "name") or f"Sheet{number}"
        try:
            yield from _sheet_parts(name, number, _ods_lines(table, context, name))
        except Exception as exc:  # a damaged sheet loses that sheet
            context.warn(f"{context.title}: sheet {number} ({unit_label(name)}) could not be read ({short_reason(exc)})")


def _ods_lines(table: Any, context: ReadContext, name: str) -> Iterator[str]:
    rows = 0
    odf = Odf()
    for row, repeat in odf_rows(table):
        line = "\t".join(odf_cells(row, lambda cell: _ods_value(cell, odf)))
        if not line.strip():
            rows += repeat  # empty rows, however many, cost nothing
            continue
        for _ in range(min(repeat, MAX_ROWS - rows)):
            yield line
        rows += repeat
        if rows >= MAX_ROWS:
            context.warn(f"{context.title}: sheet {unit_label(name)} claims over {MAX_ROWS:,} rows; the rest is skipped")
            return


def _ods_value(cell: Any, odf: Odf) -> str:
    kind = cell.getAttrNS(OFFICE, "value-type")
    if kind in ("float", "percentage", "currency"):
        value = cell.getAttrNS(OFFICE, "value")
        if value:
            return cell_text(_number(value))
    elif kind == "date":
        value = cell.getAttrNS(OFFICE, "date-value")
        if value:
            return str(value).removesuffix("T00:00:00")
    elif kind == "time":
        value = cell.getAttrNS(OFFICE, "time-value")
        if value:
            return _iso_duration(value)
    elif kind == "boolean":
        value = cell.getAttrNS(OFFICE, "boolean-value")
        if value:
            return "TRUE" if value.lower() == "true" else "FALSE"
    texts = [odf.paragraph(p) for p in odf_elements(cell, (TEXT, "p"))]
    return cell_text("\n".join(t for t in texts if t))


def _number(text: str) -> object:
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return text


_DURATION = re.compile(r"-?P(?:\d+D)?T(\d+)H(\d+)M(\d+(?:\.\d+)?)S$")


def _iso_duration(value: str) -> str:
    """An OpenDocument time ("PT13H05M00S") as 13:05:00; other durations as written."""
    match = _DURATION.match(value)
    if not match:
        return value
    hours, minutes, seconds = match.groups()
    return f"{int(hours):02d}:{int(minutes):02d}:{seconds.split('.')[0].zfill(2)}"
