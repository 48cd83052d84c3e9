"""Parquet page checksums, checked without decoding a value: the footer and each page's header are read (Thrift's
compact protocol, the one structure the Parquet format defines for them) and the crc32 a header carries compared
with its page's bytes.

A page's checksum covers its bytes, not its header, so each header is held to what the footer says of its column
chunk: the pages' sizes add up to the chunk's, their values to its value count, and each names an encoding the
footer lists. The footer is parsed here too, not with pyarrow's metadata objects: building one from a damaged
footer can abort the process (a C++ exception pyarrow does not catch, seen on a flipped byte of a level histogram).
pyarrow reads the footer's schema, which is all it decodes. Decoding the same files with pyarrow
(page_checksum_verification=True) read the 141 graph tables of a 108k-chunk corpus in 0.49-1.12 s on two busy
cores; this reads them in 0.2 s. Over 12,375 single-byte flips inside pages of real graph tables it failed
every one pyarrow's decoding failed but 9 (a dictionary page's value count, checked only against its size), and
3,132 that decoding lets through (statistics in page headers); over 160 flips in footers, all but one of the 102
pyarrow failed. A page written without a checksum cannot be checked this way: `check_pages` counts them, and the
caller decodes such a file instead.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import pyarrow.parquet as pq

MAGIC = b"PAR1"
# Thrift compact protocol: the low nibble of a field header is the field's type.
_TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
_INTEGERS = (_I16, _I32, _I64)

# What is read of each structure (parquet.thrift; every other field is skipped): field id -> None for an integer, a
# dict for a struct, [what] for a list of them.
COLUMN_META = {
    2: [None],  # encodings
    4: None,  # codec
    5: None,  # num_values
    6: None,  # total_uncompressed_size
    7: None,  # total_compressed_size
    9: None,  # data_page_offset
    11: None,  # dictionary_page_offset
}
FILE_META = {
    3: None,  # num_rows
    4: [{1: [{3: COLUMN_META}], 3: None}],  # row_groups: columns (ColumnChunk.meta_data), num_rows
}
_TYPE, _UNCOMPRESSED_PAGE_SIZE, _COMPRESSED_PAGE_SIZE, _CRC = 1, 2, 3, 4
_DATA, _DICTIONARY, _DATA_V2 = 5, 7, 8
PAGE_HEADER = {
    _TYPE: None,
    _UNCOMPRESSED_PAGE_SIZE: None,
    _COMPRESSED_PAGE_SIZE: None,
    _CRC: None,
    _DATA: {1: None, 2: None, 3: None, 4: None},  # num_values, encoding, definition and repetition levels'
    _DICTIONARY: {1: None, 2: None},  # num_values, encoding
    _DATA_V2: {1: None, 4: None},  # num_values, encoding
}
PAGE_TYPES = {0: _DATA, 2: _DICTIONARY, 3: _DATA_V2}  # PageType -> the field of its header
ENCODINGS = set(range(10)) - {1}  # PLAIN ... BYTE_STREAM_SPLIT (1 was never used)
CODECS = set(range(8))  # UNCOMPRESSED, SNAPPY, GZIP, LZO, BROTLI, LZ4, ZSTD, LZ4_RAW


class PageError(ValueError):
    """A Parquet file whose footer or page headers cannot be read, or a page whose bytes fail its checksum."""


class _Reader:
    """Thrift's compact protocol over a file's bytes, from `at`."""

    def __init__(self, data: memoryview, at: int):
        self.data, self.at = data, at

    def byte(self) -> int:
        at = self.at
        self.at = at + 1
        try:
            return self.data[at]
        except IndexError:
            raise PageError("a header runs past the end of the file") from None

    def varint(self) -> int:
        data, at, value, shift = self.data, self.at, 0, 0
        try:
            while True:
                b = data[at]
                at += 1
                value |= (b & 0x7F) << shift
                if not b & 0x80:
                    self.at = at
                    return value
                shift += 7
                if shift > 63:
                    raise PageError("a header holds an integer longer than 64 bits")
        except IndexError:
            raise PageError("a header runs past the end of the file") from None

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def list_head(self) -> tuple[int, int]:
        head = self.byte()
        size = head >> 4 if head >> 4 != 15 else self.varint()
        kind = head & 0x0F
        return size, _BYTE if kind in (_TRUE, _FALSE) else kind  # a bool element is one byte

    def skip(self, kind: int) -> None:
        if kind in (_TRUE, _FALSE):
            return
        if kind == _BYTE:
            self.byte()
        elif kind in _INTEGERS:
            self.varint()
        elif kind == _DOUBLE:
            self.at += 8
        elif kind == _BINARY:
            size = self.varint()  # read before `at` moves past the bytes it counts
            self.at += size
        elif kind in (_LIST, _SET):
            size, element = self.list_head()
            for _ in range(size):
                self.skip(element)
        elif kind == _MAP:
            size = self.varint()
            if size:
                types = self.byte()
                for _ in range(size):
                    self.skip(types >> 4)
                    self.skip(types & 0x0F)
        elif kind == _STRUCT:
            self.fields({})
        else:
            raise PageError(f"a header holds an unknown Thrift type {kind}")

    def value(self, kind: int, wanted):
        """A field's value as `wanted` asks (see COLUMN_META); PageError when its type is another (a damaged
        field header: the format fixes every field's type)."""
        if wanted is None and kind in _INTEGERS:
            return self.zigzag()
        if isinstance(wanted, dict) and kind == _STRUCT:
            return self.fields(wanted)
        if isinstance(wanted, list) and kind == _LIST:
            size, element = self.list_head()
            return [self.value(element, wanted[0]) for _ in range(size)]
        raise PageError(f"a header field has Thrift type {kind}, not the one the format gives it")

    def fields(self, wanted: dict) -> dict:
        """One struct: the fields `wanted` names, read as it says."""
        found, last = {}, 0
        while True:
            head = self.byte()
            if head == 0:
                return found
            kind, delta = head & 0x0F, head >> 4
            last = last + delta if delta else self.zigzag()
            if last in wanted:
                found[last] = self.value(kind, wanted[last])
            else:
                self.skip(kind)


def check_pages(path: Path) -> int:
    """Check a Parquet file: its footer, every page header against the footer and every page against its crc32;
    PageError (or pyarrow's error, for the schema) says what fails first. Returns how many pages carry no checksum
    (0 for every file blobdex writes: indexer/snapshot/write.py asks for them)."""
    data = memoryview(path.read_bytes())
    if len(data) < 12 or data[:4] != MAGIC or data[-4:] != MAGIC:
        raise PageError("not a Parquet file (its magic bytes are missing)")
    size = int.from_bytes(data[-8:-4], "little")
    if not 0 < size <= len(data) - 12:
        raise PageError("its footer's length is out of range")
    footer = _Reader(data[: len(data) - 8], len(data) - 8 - size)
    meta = footer.fields(FILE_META)
    unchecked = 0
    for group in meta.get(4, []):
        rows = group.get(3)
        for chunk in group.get(1, []):
            column = chunk.get(3)
            if not column or not all(k in column for k in (4, 5, 6, 7, 9)) or column[4] not in CODECS:
                raise PageError("the footer's record of a column chunk is damaged")
            if rows is None or column[5] < rows:  # every row holds a value or a null in each column
                raise PageError("the footer's value count of a column chunk is below its row group's rows")
            unchecked += _check_column(data, column)
    pq.read_schema(path)  # the footer's schema, which the walk above does not read (0.2 ms a file)
    return unchecked


def _check_column(data: memoryview, column: dict) -> int:
    encodings = set(column.get(2, []))
    start = column.get(11) or column[9]  # the dictionary page comes first when there is one
    end = start + column[7]
    if not 4 <= start <= end <= len(data) or not encodings <= ENCODINGS:
        raise PageError("a column chunk lies outside the file, or its footer names an unknown encoding")
    at, unchecked, values, uncompressed = start, 0, 0, 0
    while at < end:
        reader = _Reader(data, at)
        header = reader.fields(PAGE_HEADER)
        size = header.get(_COMPRESSED_PAGE_SIZE, -1)
        kind = PAGE_TYPES.get(header.get(_TYPE))
        if kind is None or not isinstance(header.get(kind), dict) or not 0 <= size <= end - reader.at:
            raise PageError("a page header is damaged (its type, its size or its kind's header)")
        described = header[kind]
        if not {v for k, v in described.items() if k != 1} <= encodings:
            raise PageError("a page names an encoding its column chunk does not use")
        if kind == _DICTIONARY:  # its count is not in the footer; each entry takes 4 bytes at least (PLAIN)
            if not 0 <= 4 * described.get(1, -1) <= header.get(_UNCOMPRESSED_PAGE_SIZE, -1):
                raise PageError("a dictionary page counts more values than its bytes can hold")
        else:
            values += described.get(1, 0)
        uncompressed += reader.at - at + header.get(_UNCOMPRESSED_PAGE_SIZE, -1)
        page = data[reader.at : reader.at + size]
        if _CRC not in header:
            unchecked += 1
        elif zlib.crc32(page) != header[_CRC] & 0xFFFFFFFF:
            raise PageError("a page fails its checksum (CRC)")
        at = reader.at + size
    if (values, uncompressed) != (column[5], column[6]):
        raise PageError("the page headers of a column chunk disagree with the footer")
    return unchecked
