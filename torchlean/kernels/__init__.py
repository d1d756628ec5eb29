"""One implementation of every primitive per backend: ``cpu`` (NumPy/SciPy) and ``cuda`` (CuPy)."""
