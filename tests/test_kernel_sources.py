"""sources.py: the text NVRTC compiles for a kernel file (headers inlined, each once, #line kept)."""

from __future__ import annotations

import re

from torchlean.kernels.cuda.sources import HERE, source, with_includes


def test_every_kernel_file_is_left_with_no_include_line():
    for path in sorted(HERE.glob("*.cu")):
        assert not re.search(r'^#include "', source(path.name), re.MULTILINE), path.name


def test_nested_headers_are_inlined_once_each():
    text = with_includes("attention_mma.cu")
    common = (HERE / "attention_common.cuh").read_text()
    assert text.count(common) == 1  # through attention_mma.cuh
    assert text.count("struct TlAttnMask {") == 1
    assert text.count("__device__ __forceinline__ void tl_mma8(") == 1


def test_line_directives_point_back_at_the_including_file():
    raw = (HERE / "attention.cu").read_text().splitlines()
    at = next(i for i, line in enumerate(raw) if line.startswith('#include "'))
    text = with_includes("attention.cu").splitlines()
    back = text.index(f'#line {at + 2} "attention.cu"')
    assert text[back + 1] == raw[at + 1]  # the line after the include keeps its number
    assert text[at] == '#line 1 "attention_common.cuh"'
