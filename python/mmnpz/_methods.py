"""Members compressed by a method the C++ core does not decode, decoded here as Python's
zipfile decodes them: bzip2 (ZIP method 12) and LZMA (14). numpy reads an archive through
zipfile, so ``np.load`` reads such members (``zip -Z bzip2``, ``zipfile.ZIP_BZIP2`` or
``ZIP_LZMA``); ``mmnpz.load`` gives them back as numpy does, as ordinary arrays. The core
finds and checks the member's local header and reads its stored bytes; only the decoding is
Python's standard library."""

import bz2
import lzma
import zlib

from . import _mmnpz

#: The ZIP methods decoded here, by number, with their names for messages.
METHODS = {12: "bzip2", 14: "LZMA"}


# FormatError.code as the core gives it (mmnpz::errc in include/mmnpz/error.hpp).
_CORRUPT_ZIP, _CHECKSUM = 1, 9


def _format_error(message, path, member, code=_CORRUPT_ZIP):
    error = _mmnpz.FormatError(message)
    error.path, error.member, error.offset, error.code = path, member, None, code
    return error


def _lzma_decompressor(stored, fail):
    """(decompressor, offset of the stream): a ZIP LZMA member starts with the LZMA SDK's
    version (2 bytes) and the length of the LZMA properties (2 bytes, little-endian) that
    follow, then the raw LZMA1 stream."""
    if len(stored) < 4:
        fail("its LZMA header is cut short")
    length = int.from_bytes(stored[2:4], "little")
    if len(stored) < 4 + length:
        fail("its LZMA properties are cut short")
    try:
        filters = [lzma._decode_filter_properties(lzma.FILTER_LZMA1, stored[4:4 + length])]
    except lzma.LZMAError as e:
        fail(f"its LZMA properties are bad ({e})")
    return lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=filters), 4 + length


def decode(reader, index, member, path):
    """The contents of member `index` (``member`` is ``reader.member(index)``) of a method in
    METHODS, decoded and checked against the directory's size and CRC-32 (FormatError naming
    the archive and member otherwise)."""
    name, method = member["name"], member["method"]

    def fail(why, code=_CORRUPT_ZIP):
        raise _format_error(f"{path}: member {name!r}: {why}", path, name, code)

    stored = reader.stored_bytes(index)
    size = member["uncompressed_size"]
    if method == 12:
        decompressor, start = bz2.BZ2Decompressor(), 0
    else:
        decompressor, start = _lzma_decompressor(stored, fail)
    try:
        # One byte more than the directory's size tells a longer stream from a right one,
        # and a stream that claims to grow without end is stopped there.
        data = decompressor.decompress(memoryview(stored)[start:], size + 1)
    except (OSError, EOFError, ValueError, lzma.LZMAError) as e:
        fail(f"its {METHODS[method]} stream is corrupt ({e})")
    if len(data) > size:
        fail(f"its {METHODS[method]} stream decodes to more than the {size} bytes the central "
             f"directory says")
    if len(data) < size:
        how = "decodes to" if decompressor.eof else "stops short, at"
        fail(f"its {METHODS[method]} stream {how} {len(data)} bytes, the central directory "
             f"says {size}")
    crc = zlib.crc32(data)
    if crc != member["crc32"]:
        fail(f"CRC-32 is 0x{crc:08x}, the central directory says 0x{member['crc32']:08x}",
             _CHECKSUM)
    return data
