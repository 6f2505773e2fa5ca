"""mmnpz pack: arrays and audio files into sharded aligned archives for training.

    python3 -m mmnpz.pack OUT.npz INPUT... [--max-bytes SIZE] [--max-items N] [--align N]
                          [--jobs N] [--strict] [--progress]

Each INPUT is a ``.npy`` file, a ``.npz`` archive (each member is packed), an audio file or a
directory, searched recursively for all of these (sorted by path; names starting with "." are
left out). The shards are written with :class:`mmnpz.ShardWriter` as
``OUT-00000-of-0000N.npz`` ... and open with ``mmnpz.Dataset("OUT@N.npz")``; the summary line
names that spec.

Member names: an input's path relative to the directory argument it was found in (or its
file name, for a file argument), without extension: ``wavs/spk1/a.wav`` found in ``wavs``
is ``spk1/a``. A ``.npz`` input's members are ``<archive stem>/<member>``.

Audio becomes a ``(frames, channels)`` array of the samples as stored, no scaling: 8-bit PCM
as uint8 (unsigned, 128 is silence), 16-bit as int16, 24-bit as int32 **with the sample in the
high 24 bits** (the low byte zero: ``x / 2**31`` is full scale for every int32 array, as
libsndfile reads 24-bit files), 32-bit as int32, float as float32 (float64 for 64-bit float),
and lossy formats (Ogg Vorbis, Opus, MP3) decoded to float32. Next to each, a raw member
``<name>.json`` holds ``{"sample_rate": ..., "channels": ..., "frames": ..., "bits_per_sample":
... (PCM only), "source": "<path of the input>"}``. ``.wav`` files are read with Python's
``wave`` module (PCM); other formats, and WAV files that ``wave`` cannot read (float, or
WAVE_FORMAT_EXTENSIBLE before Python 3.12), with the ``soundfile`` module
(``apt-get install python3-soundfile``).

An input that cannot be read is reported by name on stderr and skipped (the exit status is
then 1), or with ``--strict`` stops the run (exit status 1). Stopping loses nothing: the
shards written so far, and the last one with what it holds, are closed and renamed. The first
shard is made for the first member: a run that packs no input (a mistyped path, an empty
directory, ``--strict`` stopping at the first input) writes none, and the shards of an earlier
run of the same name stay as they were.
``--jobs N`` decodes N inputs at a time in threads; members are written in input order.
``--max-items`` counts members; an audio file's samples and sidecar always share a shard (the
two alone when they pass the limits together).
"""

import argparse
import collections
import concurrent.futures
import json
import os
import re
import struct
import sys
import time
import wave

import numpy as np

from ._npz import NpzReader
from .shards import ShardWriter

WAVE_EXTENSIONS = (".wav", ".wave")
SOUNDFILE_EXTENSIONS = (".flac", ".ogg", ".oga", ".opus", ".mp3", ".aif", ".aiff", ".aifc",
                        ".au", ".snd", ".caf", ".w64", ".rf64")
ARRAY_EXTENSIONS = (".npy", ".npz")
SUPPORTED = ARRAY_EXTENSIONS + WAVE_EXTENSIONS + SOUNDFILE_EXTENSIONS

_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SOUNDFILE_HINT = "apt-get install python3-soundfile"


class InputError(Exception):
    """An input that cannot be packed; the message says why."""


class SizeError(argparse.ArgumentTypeError, ValueError):
    """A size that parse_size cannot read."""


def parse_size(text):
    """Bytes from "4096", "64K", "512M", "2G", "1.5T" (K, M, G, T: powers of 1024; a trailing
    "B" or "iB" is allowed)."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([KMGT]?)(?:i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise SizeError(
            f"{text!r} is not a size (a number of bytes, or with K, M, G or T: 512M, 2G)")
    value = int(float(m.group(1)) * _SIZE_UNITS[m.group(2).upper()])
    if value <= 0:
        raise SizeError(f"{text!r}: the size must be positive")
    return value


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be positive")
    return value


def _format_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"  # pragma: no cover


# ---- finding the inputs ---------------------------------------------------------------------

Input = collections.namedtuple("Input", "path name error")
Input.__doc__ = """A file to pack: its path, its member name (or name prefix, for .npz) and,
for an argument that cannot be packed, the error to report instead."""


def _stem(relative):
    root, _ = os.path.splitext(relative)
    return root.replace(os.sep, "/")


def find_inputs(arguments):
    """The inputs the arguments name, in order: files as they are, directories walked
    recursively (supported files sorted by relative path, hidden names left out)."""
    out = []
    for arg in arguments:
        if os.path.isdir(arg):
            found = []
            for root, dirs, files in os.walk(arg):
                dirs[:] = [d for d in dirs if not d.startswith(".")]
                for f in files:
                    if f.startswith(".") or not f.lower().endswith(SUPPORTED):
                        continue
                    path = os.path.join(root, f)
                    found.append((_stem(os.path.relpath(path, arg)), path))
            if not found:
                out.append(Input(arg, None, "the directory holds no .npy, .npz or audio file"))
            out.extend(Input(path, name, None) for name, path in sorted(found))
        elif not os.path.exists(arg):
            out.append(Input(arg, None, "No such file or directory"))
        elif not arg.lower().endswith(SUPPORTED):
            out.append(Input(arg, None, "not a .npy, .npz or audio file ("
                             + ", ".join(SUPPORTED) + ")"))
        else:
            out.append(Input(arg, _stem(os.path.basename(arg)), None))
    return out


# ---- decoding -------------------------------------------------------------------------------

def _soundfile():
    """The soundfile module, or None when it is not installed."""
    try:
        import soundfile  # noqa: PLC0415  (optional dependency)
    except ImportError:  # also OSError when libsndfile is missing
        return None
    except OSError:
        return None
    return soundfile


def _sidecar(rate, channels, frames, bits, source):
    meta = {"sample_rate": int(rate), "channels": int(channels), "frames": int(frames)}
    if bits:
        meta["bits_per_sample"] = int(bits)
    meta["source"] = source
    return json.dumps(meta).encode()


def read_wave(path):
    """(samples, sidecar) of a PCM WAV file read with the wave module; InputError when the file
    is not one wave reads (see read_audio) or is truncated."""
    with wave.open(path, "rb") as w:
        channels, width, rate, frames = (w.getnchannels(), w.getsampwidth(), w.getframerate(),
                                         w.getnframes())
        raw = w.readframes(frames)
    frame_bytes = channels * width
    if len(raw) != frames * frame_bytes:
        raise InputError(f"truncated: the header promises {frames} frames, the file holds "
                         f"{len(raw) // frame_bytes}" + (f" and {len(raw) % frame_bytes} bytes"
                                                        if len(raw) % frame_bytes else ""))
    if width == 1:
        samples = np.frombuffer(raw, np.uint8)
    elif width == 2:
        samples = np.frombuffer(raw, "<i2")
    elif width == 3:  # into the high 24 bits of an int32, the low byte zero
        wide = np.zeros((len(raw) // 3, 4), np.uint8)
        wide[:, 1:] = np.frombuffer(raw, np.uint8).reshape(-1, 3)
        samples = wide.reshape(-1).view("<i4")
    elif width == 4:
        samples = np.frombuffer(raw, "<i4")
    else:
        raise InputError(f"{8 * width}-bit samples are not supported")
    return samples.reshape(frames, channels), _sidecar(rate, channels, frames, 8 * width, path)


_SOUNDFILE_DTYPES = {"PCM_16": "int16", "PCM_24": "int32", "PCM_32": "int32",
                     "FLOAT": "float32", "DOUBLE": "float64"}
_SOUNDFILE_BITS = {"PCM_U8": 8, "PCM_S8": 8, "PCM_16": 16, "PCM_24": 24, "PCM_32": 32}


def read_soundfile(path, soundfile):
    """(samples, sidecar) of any file libsndfile reads (see the module's documentation)."""
    try:
        info = soundfile.info(path)
        subtype = info.subtype
        if subtype in ("PCM_U8", "PCM_S8"):
            wide = soundfile.read(path, dtype="int16", always_2d=True)[0] >> 8
            samples = (wide + 128).astype(np.uint8) if subtype == "PCM_U8" else wide.astype(np.int8)
        else:
            samples = soundfile.read(path, dtype=_SOUNDFILE_DTYPES.get(subtype, "float32"),
                                     always_2d=True)[0]
    except RuntimeError as e:  # soundfile.LibsndfileError and older soundfile's errors
        raise InputError(str(e)) from None
    exact = subtype in _SOUNDFILE_BITS or subtype in _SOUNDFILE_DTYPES  # lossy: an estimate
    if exact and samples.shape[0] != info.frames:
        raise InputError(f"truncated: the header promises {info.frames} frames, the file holds "
                         f"{samples.shape[0]}")
    return samples, _sidecar(info.samplerate, info.channels, samples.shape[0],
                             _SOUNDFILE_BITS.get(subtype), path)


def read_audio(path, soundfile_module=None):
    """(samples, sidecar JSON bytes) of an audio file: WAV through wave, other formats (and WAV
    that wave cannot read) through soundfile."""
    lower = path.lower()
    if lower.endswith(WAVE_EXTENSIONS):
        try:
            return read_wave(path)
        except wave.Error as e:
            # wave reads integer PCM only: float or WAVE_FORMAT_EXTENSIBLE files need soundfile.
            if not str(e).startswith("unknown format"):
                raise InputError(f"not a readable WAV file ({e})") from None
            why = f"Python's wave module cannot read this WAV file ({e})"
            sf = soundfile_module or _soundfile()
            if sf is None:
                raise InputError(f"{why}; reading it needs the soundfile module: "
                                 f"{_SOUNDFILE_HINT}") from None
            return read_soundfile(path, sf)
        except (EOFError, struct.error) as e:
            why = str(e) or "unexpected end of file"
            raise InputError(f"truncated or not a WAV file ({why})") from None
    sf = soundfile_module or _soundfile()
    if sf is None:
        ext = os.path.splitext(path)[1]
        raise InputError(f"reading {ext} files needs the soundfile module: {_SOUNDFILE_HINT}")
    return read_soundfile(path, sf)


def decode(item, soundfile_module=None):
    """The members of one input: a list of (name, array) and (name, bytes) pairs."""
    if item.error:
        raise InputError(item.error)
    path, name = item.path, item.name
    lower = path.lower()
    try:
        if lower.endswith(".npy"):
            try:
                array = np.load(path, mmap_mode="r", allow_pickle=False)
            except ValueError as e:
                if _holds_objects(path):
                    raise InputError("a pickled object array, which cannot be packed") from None
                raise InputError(f"not a readable .npy file ({e})") from None
            if not isinstance(array, np.ndarray):
                raise InputError("not a .npy file")
            return [(name, array)]
        if lower.endswith(".npz"):
            return _npz_members(path, name)
        samples, sidecar = read_audio(path, soundfile_module)
        return [(name, samples), (name + ".json", sidecar)]
    except OSError as e:
        raise InputError(e.strerror or str(e)) from None


def _holds_objects(path):
    """Whether the .npy file at path has a header numpy reads and a dtype holding Python
    objects (which numpy refuses to map, in words that do not say so)."""
    try:
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            return read_header(f)[2].hasobject
    except (ValueError, OSError):
        return False


def _npz_members(path, prefix):
    try:
        reader = NpzReader(path, cache=False)
        bad = reader.verify()
        if bad:
            member, message = next(iter(bad.items()))
            raise InputError(f"member {member!r} is corrupt: {message}")
        out = []
        for key in reader.files:
            info = reader.info(key)
            if info.kind == "object":
                raise InputError(f"member {info.name!r} is a pickled object array, which cannot "
                                 "be packed")
            # .npy members by their key (name without .npy), others by their full name.
            out.append((f"{prefix}/{key}", reader[key]))
        return out
    except ValueError as e:  # FormatError and its kin
        raise InputError(str(e)) from None


# ---- progress -------------------------------------------------------------------------------

class Progress:
    """A bar on stderr redrawn in place on a terminal; forced elsewhere, a line per tenth."""

    def __init__(self, total, enabled):
        self.total = max(total, 1)
        self.tty = sys.stderr.isatty()
        self.enabled = enabled
        self.last_draw = 0.0
        self.last_tenth = -1
        self.last_done = -1

    def update(self, done, written, shards, final=False):
        """Shows ``done`` inputs of the total, ``written`` bytes and ``shards`` shards (when
        enabled); ``final`` draws the last state and ends the line."""
        if not self.enabled:
            return
        text = (f"{done}/{self.total} inputs, {_format_bytes(written)}, "
                f"{shards} shard{'s' if shards != 1 else ''}")
        if self.tty:
            now = time.monotonic()
            if not final and now - self.last_draw < 0.1:
                return
            self.last_draw = now
            filled = 30 * done // self.total
            print(f"\r[{'#' * filled}{'.' * (30 - filled)}] {text}", end="\n" if final else "",
                  file=sys.stderr, flush=True)
        else:
            tenth = 10 * done // self.total
            if tenth != self.last_tenth or (final and done != self.last_done):
                self.last_tenth, self.last_done = tenth, done
                print(f"pack: {text}", file=sys.stderr, flush=True)


# ---- the command ----------------------------------------------------------------------------

def _parser():
    p = argparse.ArgumentParser(
        prog="mmnpz pack",
        description="Packs .npy files, .npz archives, audio files and directories of them into "
                    "sharded aligned .npz archives (OUT-00000-of-0000N.npz ...).",
        epilog="Audio: (frames, channels) arrays as stored (24-bit PCM as int32, sample in the "
               "high 24 bits) and a <name>.json member with the sample rate. FLAC, Ogg and "
               f"other formats need the soundfile module: {_SOUNDFILE_HINT}.")
    p.add_argument("out", metavar="OUT.npz", help="the name the shards are named after")
    p.add_argument("inputs", metavar="INPUT", nargs="+",
                   help=".npy, .npz or audio file, or a directory of them")
    p.add_argument("--max-bytes", type=parse_size, metavar="SIZE",
                   help="largest shard file (bytes, or 512M, 2G...); no limit by default")
    p.add_argument("--max-items", type=_positive_int, metavar="N",
                   help="most members per shard (an audio file makes two, always in one "
                        "shard); no limit by default")
    p.add_argument("--align", type=_positive_int, default=64, metavar="N",
                   help="array data starts at a multiple of N bytes (a power of two up to 65536; "
                        "default 64)")
    p.add_argument("--jobs", "-j", type=_positive_int, default=1, metavar="N",
                   help="inputs decoded at a time, in threads (default 1)")
    p.add_argument("--strict", action="store_true",
                   help="stop at the first input that cannot be read (exit status 1)")
    p.add_argument("--progress", action="store_true",
                   help="show progress on stderr even when it is not a terminal")
    return p


def _os_message(e):
    if e.filename is not None and e.strerror:
        return f"cannot write '{e.filename}': {e.strerror}"
    return str(e)


_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\udc80-\udcff]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _shown(text):
    """``text`` (paths, messages) as stderr shows it: control characters, line separators and
    the bytes of a file name that are no UTF-8 (surrogate-escaped) escaped, as the C++
    commands show them, so that a hostile file name cannot drive the terminal."""
    def escape(m):
        c = m.group()
        if c in _NAMED:
            return _NAMED[c]
        code = ord(c)
        return f"\\x{code - 0xDC00:02x}" if code >= 0xDC80 else (
            f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}")
    return _CONTROLS.sub(escape, str(text))


def _report(path, message):
    print(f"pack: {_shown(path)}: {_shown(message)}", file=sys.stderr, flush=True)


Result = collections.namedtuple("Result",
                                "spec paths packed members bytes skipped stopped error")
Result.__doc__ = """What run() did: the shard spec and the shard paths, the inputs packed, the
members and bytes (of array data and raw members) written, the inputs skipped, whether the
run stopped early (--strict, or a write error) and the write error (an OSError) or None."""


def run(out, inputs, *, max_bytes=None, max_items=None, align=64, jobs=1, strict=False,
        progress=None, report=None):
    """Packs ``inputs`` (paths of files and directories) into shards named after ``out``, as
    the command does; returns a :class:`Result` (``result.spec`` opens them as a Dataset).
    ``max_bytes`` may be a size string ("512M"). An input that cannot be read is passed to
    ``report(path, message)`` (default: a line on stderr) and skipped, or with ``strict``
    stops the run; when no input can be read, nothing is written (the result has no paths,
    and a spec of None). ``progress``: a bar on stderr (None: when stderr is a terminal).
    Raises ValueError for bad options and OSError when the shards cannot be created or
    written."""
    if isinstance(max_bytes, str):
        max_bytes = parse_size(max_bytes)
    if not isinstance(jobs, int) or jobs <= 0:
        raise ValueError(f"jobs must be a positive int, not {jobs!r}")
    out = os.fsdecode(os.fspath(out))
    inputs = [os.fsdecode(os.fspath(i)) for i in inputs]
    report = report or _report
    # The shards this run writes (ShardWriter refuses an `out` without .npz).
    stem = os.path.realpath(out)[:-len(".npz")]
    own = re.compile(re.escape(stem) + r"-[0-9]{5,}(-of-[0-9]{5,})?\.npz(\.partial)?")
    for given in inputs:
        # A shard of an earlier run named as an input would be overwritten before being read.
        if out.endswith(".npz") and os.path.isfile(given) and own.fullmatch(
                os.path.realpath(given)):
            raise ValueError(f"{given} is one of the shards this run writes ({out}): it would "
                             "be overwritten; pack into another name")
    ShardWriter._check_options(out, max_bytes, max_items, align)  # before walking the inputs
    # Shards of this name found in a directory given are what this run replaces, not inputs.
    found = [i for i in find_inputs(inputs) if not own.fullmatch(os.path.realpath(i.path))]
    # The writer is made for the first member: a run that stops before it (--strict at a
    # mistyped path or a broken first input) or reads nothing writes no shard, so the shards
    # of an earlier run of this name are not replaced by an empty one.
    writer = None

    def open_writer():
        nonlocal writer
        if writer is None:
            if os.path.dirname(out):
                os.makedirs(os.path.dirname(out), exist_ok=True)
            writer = ShardWriter(out, max_bytes=max_bytes, max_items=max_items, align=align)
        return writer

    bar = Progress(len(found), sys.stderr.isatty() if progress is None else progress)
    soundfile_module = _soundfile()
    packed = skipped = members = written = done = 0
    stopped, error = False, None
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        pending = collections.deque()
        upcoming = iter(found)

        def fill():
            while len(pending) < 2 * jobs:
                item = next(upcoming, None)
                if item is None:
                    return
                pending.append((item, pool.submit(decode, item, soundfile_module)))

        try:
            fill()
            while pending:
                item, future = pending.popleft()
                fill()
                decoded = None
                try:
                    try:
                        decoded = future.result()
                    except (ValueError, RuntimeError, EOFError) as e:  # not foreseen by decode
                        raise InputError(f"{type(e).__name__}: {e}") from None
                    if decoded:
                        open_writer()  # its errors (a writer holding the name) end the run
                    try:
                        if item.path.lower().endswith(ARRAY_EXTENSIONS):
                            for name, value in decoded:
                                writer.write_group([(name, value)])
                                members += 1
                        else:  # audio and its sidecar, in one shard
                            writer.write_group(decoded)
                            members += len(decoded)
                    except ValueError as e:  # a name the archive refuses
                        raise InputError(str(e)) from None
                    written += sum(len(v) if isinstance(v, bytes) else v.nbytes
                                   for _, v in decoded)
                    packed += 1
                except InputError as e:
                    skipped += 1
                    report(item.path, str(e))
                    if strict:
                        stopped = True
                        break
                finally:
                    del decoded  # the arrays (and mappings) of an input are dropped once written
                done += 1
                bar.update(done, written, writer.shards if writer else 0)
            if packed and not stopped:
                open_writer()  # inputs that hold no member (an empty .npz): one empty shard
            bar.update(done, written, writer.shards if writer else 0, final=True)
        except OSError as e:  # writing failed; the shards so far are closed and renamed
            stopped, error = True, e
        finally:
            for _, future in pending:
                future.cancel()
            if writer is not None:
                try:
                    writer.close()
                except OSError as e:
                    stopped, error = True, error or e
    if writer is None:
        return Result(None, [], packed, members, written, skipped, stopped, error)
    return Result(writer.spec, writer.paths, packed, members, written, skipped, stopped, error)


def main(argv=None):
    """Runs ``pack`` with ``argv`` (without the program name; default sys.argv[1:]); prints a
    summary line on stdout and returns the exit status: 0; 1 when an input was skipped, the run
    stopped or writing failed; 2 for a usage error."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as e:  # --help, or a usage error already printed
        return e.code if isinstance(e.code, int) else 2
    try:
        r = run(args.out, args.inputs, max_bytes=args.max_bytes, max_items=args.max_items,
                align=args.align, jobs=args.jobs, strict=args.strict,
                progress=True if args.progress else None)
    except ValueError as e:  # the options, checked before anything is written
        print(f"pack: {_shown(e)}", file=sys.stderr)
        return 2
    except OSError as e:  # the first shard cannot be created
        print(f"pack: {_shown(_os_message(e))}", file=sys.stderr)
        return 1
    if r.error:
        print(f"pack: {_shown(_os_message(r.error))}", file=sys.stderr)
    if not r.paths:
        if not r.error:
            print(f"pack: no input was packed; no shard was written ({_shown(args.out)} and the "
                  f"shards of an earlier run are as they were)", file=sys.stderr)
        return 1
    summary = (f"packed {r.packed} input{'s' if r.packed != 1 else ''} ({r.members} member{'s' if r.members != 1 else ''}, "
               f"{_format_bytes(r.bytes)}) into {len(r.paths)} "
               f"shard{'s' if len(r.paths) != 1 else ''}: {r.spec}")
    if r.skipped:
        summary += f"; {r.skipped} skipped"
    if r.stopped:
        summary += "; stopped early"
    print(summary, flush=True)
    return 1 if r.skipped or r.stopped else 0


if __name__ == "__main__":
    sys.exit(main())
