"""Resource usage of the kernels in a cubin, read from its ELF sections.

CuTe DSL hands back the cubin ptxas built (``--keep-cubin``) but no resource report,
and no CUDA tool (cuobjdump, nvdisasm) need be installed. The figures a kernel's
occupancy depends on are in the ELF itself: the register count in bits 24-31 of the
``EIATTR_REGCOUNT`` records of ``.nv.info`` (older cubins: bits 24-31 of the
``.text.<kernel>`` section's ``sh_info``), static shared memory as the size of
``.nv.shared.<kernel>``, and the stack frame (local memory, where spills go) in the
``EIATTR_FRAME_SIZE`` records.
"""

from __future__ import annotations

import struct

from pydantic import BaseModel

from kgen.errors import KgenError

_EIATTR_FRAME_SIZE = 0x11
_EIATTR_REGCOUNT = 0x2F
_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4


class CubinKernel(BaseModel):
    """One kernel's resources as ptxas assigned them."""

    name: str
    registers: int
    static_shared_bytes: int = 0
    frame_bytes: int = 0


class CubinError(KgenError, ValueError):
    """Bytes that are not a 64-bit ELF cubin."""


def _sections(data: bytes) -> list[tuple[str, int, int, int, int]]:
    """``(name, type, offset, size, info)`` of every section."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        raise CubinError("not a 64-bit ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    raw = []
    for i in range(shnum):
        name, kind, _flags, _addr, offset, size, _link, info = struct.unpack_from(
            "<IIQQQQII", data, shoff + i * shentsize
        )
        raw.append((name, kind, offset, size, info))
    names_offset = raw[shstrndx][2]

    def name_at(pos: int) -> str:
        end = data.index(b"\0", names_offset + pos)
        return data[names_offset + pos:end].decode(errors="replace")

    return [(name_at(n), kind, offset, size, info) for n, kind, offset, size, info in raw]


def _symbols(data: bytes, sections: list[tuple[str, int, int, int, int]]) -> list[str]:
    """Symbol names by index (``.nv.info`` records refer to kernels by symbol index)."""
    strtab = next((s for s in sections if s[0] == ".strtab"), None)
    symtab = next((s for s in sections if s[0] == ".symtab"), None)
    if strtab is None or symtab is None:
        return []
    names = []
    for pos in range(symtab[2], symtab[2] + symtab[3], 24):
        name_offset, = struct.unpack_from("<I", data, pos)
        end = data.index(b"\0", strtab[2] + name_offset)
        names.append(data[strtab[2] + name_offset:end].decode(errors="replace"))
    return names


def _per_kernel_records(data: bytes, sections, symbols: list[str]) -> dict[int, dict[str, int]]:
    """attribute -> kernel name -> value, for the (symbol, value) records of ``.nv.info``."""
    found: dict[int, dict[str, int]] = {_EIATTR_FRAME_SIZE: {}, _EIATTR_REGCOUNT: {}}
    for name, _kind, offset, size, _info in sections:
        if name != ".nv.info":
            continue
        pos, end = offset, offset + size
        while pos + 2 <= end:
            fmt, attr = data[pos], data[pos + 1]
            pos += 2
            if fmt == _EIFMT_SVAL:
                length, = struct.unpack_from("<H", data, pos)
                pos += 2
                if attr in found and length >= 8:
                    symbol, value = struct.unpack_from("<II", data, pos)
                    if symbol < len(symbols):
                        found[attr][symbols[symbol]] = value
                pos += length
            elif fmt == _EIFMT_HVAL:
                pos += 2
            elif fmt == _EIFMT_BVAL:
                pos += 1
            elif fmt != _EIFMT_NVAL:
                break  # an unknown record format: stop rather than misread the rest
    return found


def kernel_resources(data: bytes) -> list[CubinKernel]:
    """Every kernel (``.text.<name>`` section) of the cubin with its resources."""
    sections = _sections(data)
    shared = {name[len(".nv.shared."):]: size for name, _k, _o, size, _i in sections if name.startswith(".nv.shared.")}
    records = _per_kernel_records(data, sections, _symbols(data, sections))
    frames, registers = records[_EIATTR_FRAME_SIZE], records[_EIATTR_REGCOUNT]
    kernels = []
    for name, _kind, _offset, _size, info in sections:
        if name.startswith(".text."):
            kernel = name[len(".text."):]
            kernels.append(
                CubinKernel(
                    name=kernel,
                    registers=registers.get(kernel, (info >> 24) & 0xFF),
                    static_shared_bytes=shared.get(kernel, 0),
                    frame_bytes=frames.get(kernel, 0),
                )
            )
    return kernels
