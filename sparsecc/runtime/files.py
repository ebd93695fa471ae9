"""Reading the files sparsecc loads native code or metadata from (kernel-cache entries,
ahead-of-time manifests and libraries) as a hostile folder may hold them.

``read_regular`` opens the final name without following a symbolic link (``O_NOFOLLOW``)
and without blocking (``O_NONBLOCK``: a FIFO opens at once), refuses anything ``fstat``
does not call a regular file, and reads at most ``limit`` bytes, from the descriptor it
checked.  ``load_copy`` hands a loader exactly the bytes that were checked, from a fresh
private file (``O_EXCL``) unlinked right after the load: ``dlopen`` opens a path, so nothing
that was not verified is ever mapped, even if the original is replaced or truncated meanwhile.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat

#: the most bytes read from a JSON record (a cache entry's metadata with every IR stage of a
#: large kernel is a few MB; an AOT manifest far less)
JSON_LIMIT = 256 << 20
#: the most bytes read from a library (a cache entry's ``.so``/``.o``, an AOT ``lib<name>.so``)
LIBRARY_LIMIT = 2 << 30

_names = itertools.count()


class NotRegular(OSError):
    """The path is not a regular file we may read (``why`` says what it is), or is larger
    than the bound."""

    def __init__(self, path: str, why: str):
        super().__init__(errno.EINVAL, why, path)
        self.why = why


def _kind(mode: int) -> str:
    for test, what in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return what
    return "not a regular file"


def read_regular(path: str, limit: int) -> bytes:
    """The bytes of the regular file ``path`` (at most ``limit`` of them). Raises
    ``FileNotFoundError`` when it is missing, :class:`NotRegular` when it is a symbolic
    link, a FIFO, a device, a folder ... or larger than ``limit``, and ``OSError`` otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise NotRegular(path, "it is a symbolic link") from None
        if err.errno == errno.ENXIO:            # a socket, or a FIFO opened for writing
            raise NotRegular(path, "it is not a regular file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(path, f"it is {_kind(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            raise NotRegular(path, f"it holds {st.st_size} bytes, more than the {limit} expected at most")
        chunks, left = [], limit + 1
        while left > 0:                         # a file that grows after fstat is still bounded
            b = os.read(fd, min(left, 1 << 24))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        data = b"".join(chunks)
        if len(data) > limit:
            raise NotRegular(path, f"it holds more than the {limit} bytes expected at most")
        return data
    finally:
        os.close(fd)


def load_copy(data: bytes, folders, stem: str, suffix: str, loader):
    """``loader(path)`` on a fresh private file holding ``data``, in the first of ``folders``
    (callables giving a folder, or folder names) that can hold it; the file is unlinked
    right after the load.  The name is never used again in this process (dlopen reuses a
    loaded library with the same name), and a loaded copy keeps its inode alive (ctypes
    never unloads) so the inode cannot be recycled for a later copy."""
    last = None
    for folder in folders:
        try:
            d = folder() if callable(folder) else folder
            path = os.path.join(d, f".{stem}.{os.getpid()}.{next(_names)}.load{suffix}")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o700)
        except OSError as err:
            last = err
            continue
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return loader(path)
        finally:
            try:
                os.remove(path)
            except OSError:
                pass
    raise last if last is not None else OSError("no folder to load a library from")


def elf_problem(data: bytes) -> str | None:
    """Why ``data`` is not a whole ELF file (not ELF at all; headers, or a segment or section
    table they name, past its end: a truncated copy, which ``dlopen`` maps and then dies on
    with SIGBUS), or None."""
    import struct
    if len(data) < 16 or data[:4] != b"\x7fELF" or data[4] not in (1, 2) or data[5] not in (1, 2):
        return "it is not an ELF shared library"
    bits64, end = data[4] == 2, "<" if data[5] == 1 else ">"
    head = end + ("HHIQQQIHHHHHH" if bits64 else "HHIIIIIHHHHHH")
    if len(data) < 16 + struct.calcsize(head):
        return f"it is truncated: {len(data)} bytes hold no whole ELF header"
    (_, _, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, _) = struct.unpack_from(head, data, 16)
    need = [("its program headers", phoff + phnum * phentsize), ("its section headers", shoff + shnum * shentsize)]
    ph = end + ("IIQQQQQQ" if bits64 else "IIIIIIII")
    if phoff + phnum * phentsize <= len(data) and phentsize >= struct.calcsize(ph):
        for k in range(phnum):
            f = struct.unpack_from(ph, data, phoff + k * phentsize)
            offset, filesz = (f[2], f[5]) if bits64 else (f[1], f[4])
            need.append((f"segment {k}", offset + filesz))
    for what, upto in need:
        if upto > len(data):
            return f"it is truncated: {what} end at byte {upto}, the file holds {len(data)}"
    return None
