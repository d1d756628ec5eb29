"""``torchlean.backends.mps``: torchlean has no Apple-GPU device."""


def is_available() -> bool:
    return False


def is_built() -> bool:
    return False
