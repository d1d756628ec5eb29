"""The text NVRTC compiles for a kernel file of this folder: common.cuh, then the file with its
``#include "x.cuh"`` lines replaced by those headers (NVRTC is given no include path; a family's
kernel files share their helpers this way). No CuPy here: the kernel-name checks read it too."""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["HERE", "source", "with_includes"]

HERE = Path(__file__).resolve().parent
_INCLUDE = re.compile(r'^#include "(\w+\.cuh)"$', re.MULTILINE)


def source(file: str) -> str:
    """common.cuh, then ``file`` with its includes inlined."""
    return (HERE / "common.cuh").read_text() + f'\n#line 1 "{file}"\n' + with_includes(file)


def with_includes(file: str, seen: set[str] | None = None) -> str:
    """``file`` with each include line replaced by that header, itself expanded, each header once;
    #line directives keep compiler messages pointing at the real files and lines."""
    seen = set() if seen is None else seen

    def inline(m: re.Match) -> str:
        header, back = m.group(1), f'#line {m.string.count(chr(10), 0, m.end()) + 2} "{file}"'
        if header in seen:
            return back
        seen.add(header)
        return f'#line 1 "{header}"\n' + with_includes(header, seen) + "\n" + back

    return _INCLUDE.sub(inline, (HERE / file).read_text())
