"""Legacy Office files built byte by byte, where no installed library writes them: an OLE
compound file (`cfb`) and an Excel 97-2003 workbook in one (`biff8`). tests/test_office.py and
benchmarks/ingest/ both build theirs here."""

from __future__ import annotations

import datetime as dt
import struct


def cfb(streams: dict[str, bytes]) -> bytes:
    """A minimal OLE compound file (version 3, 512-byte sectors) holding `streams` at its root:
    the FAT sectors first (as many as the streams need, up to the 109 the header lists), then
    the one directory sector (the root and up to three streams), then the streams.

    Each stream is padded to 4096 bytes or more so it lives in ordinary sectors (smaller ones
    would need the mini stream); readers stop at their own end records, so padding is harmless.
    """
    end, free, fat_sector = 0xFFFFFFFE, 0xFFFFFFFF, 0xFFFFFFFD
    names = list(streams)
    assert len(names) <= 3, "one directory sector holds the root and three streams"
    datas = [s + b"\0" * (-len(s) % 512) for s in streams.values()]
    datas = [d + b"\0" * max(0, 4096 - len(d)) for d in datas]
    sectors = sum(len(d) // 512 for d in datas)
    n_fat = 1
    while n_fat * 128 < n_fat + 1 + sectors:
        n_fat += 1
    if n_fat > 109:
        raise ValueError("streams too large for a compound file without DIFAT sectors")
    fat = [fat_sector] * n_fat + [end]  # the FAT's own sectors, then the directory
    starts = []
    for data in datas:
        count = len(data) // 512
        starts.append(len(fat))
        fat += [len(fat) + i + 1 for i in range(count - 1)] + [end]
    fat += [free] * (n_fat * 128 - len(fat))

    def entry(name: str, kind: int, child: int, right: int, start: int, size: int) -> bytes:
        encoded = name.encode("utf-16-le") + b"\0\0"
        return (
            encoded.ljust(64, b"\0")
            + struct.pack("<HBB", len(encoded), kind, 1)
            + struct.pack("<III", free, right, child)
            + b"\0" * 16
            + struct.pack("<IQQ", 0, 0, 0)
            + struct.pack("<II", start, size)
            + b"\0" * 4
        )

    directory = entry("Root Entry", 5, 1 if names else free, free, end, 0)
    for i, (name, data) in enumerate(zip(names, streams.values())):
        right = i + 2 if i + 1 < len(names) else free
        directory += entry(name, 2, free, right, starts[i], len(datas[i]) if len(data) < 4096 else len(data))
    directory = directory.ljust(512, b"\0")
    header = (
        b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
        + b"\0" * 16
        + struct.pack("<HHHHH", 0x3E, 3, 0xFFFE, 9, 6)
        + b"\0" * 6
        + struct.pack("<IIIIIIIII", 0, n_fat, n_fat, 0, 4096, end, 0, end, 0)
        + struct.pack(f"<{n_fat}I", *range(n_fat))
        + struct.pack("<I", free) * (109 - n_fat)
    )
    assert len(header) == 512
    return header + struct.pack(f"<{len(fat)}I", *fat) + directory + b"".join(datas)


def biff8(sheets: dict[str, list[tuple[int, int, object]]], *, datemode: int = 0, encrypted: bool = False) -> bytes:
    """An Excel 97-2003 workbook (BIFF8 records in a compound file's Workbook stream).

    Cells are (row, column, value): str (LABEL), bool (BOOLERR), float or int (NUMBER),
    dt.date (NUMBER with a date format), ("formula", cached number) (FORMULA with no tokens).
    """

    def rec(code: int, data: bytes = b"") -> bytes:
        return struct.pack("<HH", code, len(data)) + data

    def bof(kind: int) -> bytes:
        return rec(0x0809, struct.pack("<HHHHII", 0x0600, kind, 0x0DBB, 0x07CC, 0, 0x06))

    def xf(fmt: int, style: bool) -> bytes:
        return rec(0x00E0, struct.pack("<HHHBBBBIiH", 0, fmt, 0xFFF4 if style else 0x0000, 0x20, 0, 0, 0, 0, 0, 0))

    def sheet_stream(cells: list[tuple[int, int, object]]) -> bytes:
        body = bof(0x0010)
        for row, col, value in cells:
            if isinstance(value, tuple):
                body += rec(0x0006, struct.pack("<HHHdHIH", row, col, 0, value[1], 0, 0, 0))
            elif isinstance(value, bool):
                body += rec(0x0205, struct.pack("<HHHBB", row, col, 0, int(value), 0))
            elif isinstance(value, (int, float)):
                body += rec(0x0203, struct.pack("<HHHd", row, col, 0, float(value)))
            elif isinstance(value, dt.date):
                epoch = dt.date(1904, 1, 1) if datemode else dt.date(1899, 12, 30)
                body += rec(0x0203, struct.pack("<HHHd", row, col, 1, float((value - epoch).days)))
            else:
                text = str(value)
                body += rec(0x0204, struct.pack("<HHHHB", row, col, 0, len(text), 1) + text.encode("utf-16-le"))
        return body + rec(0x000A)

    def globals_stream(offsets: list[int]) -> bytes:
        body = bof(0x0005)
        if encrypted:
            body += rec(0x002F, struct.pack("<H", 1) + b"\0" * 52)
        body += rec(0x0042, struct.pack("<H", 1200)) + rec(0x0022, struct.pack("<H", datemode))
        body += xf(0, True) + xf(14, False)
        for name, offset in zip(sheets, offsets):
            body += rec(0x0085, struct.pack("<IBBBB", offset, 0, 0, len(name), 1) + name.encode("utf-16-le"))
        return body + rec(0x000A)

    streams = [sheet_stream(cells) for cells in sheets.values()]
    start = len(globals_stream([0] * len(sheets)))
    offsets = []
    for stream in streams:
        offsets.append(start)
        start += len(stream)
    return cfb({"Workbook": globals_stream(offsets) + b"".join(streams)})
