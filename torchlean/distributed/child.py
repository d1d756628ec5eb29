"""``python -m torchlean.distributed.child script.py args...`` (or ``-m module args...``): what
``torchlean launch`` runs under mpiexec. It exports PyTorch's launch variables (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``) from mpiexec's own, then runs the script
(or the module, as ``python -m`` does) as ``__main__``, so a script written for torchrun finds
what it expects."""

from __future__ import annotations

import os
import runpy
import signal
import sys
import traceback

from .env import mpiexec_env


def main(argv: list[str]) -> None:
    if not argv:
        sys.exit("torchlean.distributed.child: expected a script to run")
    place = mpiexec_env()
    if place is not None:
        os.environ.update(RANK=str(place.rank), WORLD_SIZE=str(place.world_size), LOCAL_RANK=str(place.local_rank),
                          LOCAL_WORLD_SIZE=str(place.local_world_size))
    as_module = argv[0] == "-m"
    if as_module and len(argv) < 2:
        sys.exit("torchlean.distributed.child: -m needs a module name")
    sys.argv = list(argv[1:] if as_module else argv)
    if not as_module:
        sys.path.insert(0, os.path.dirname(os.path.abspath(argv[0])))
    try:
        if as_module:
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if code:
            if not isinstance(exc.code, int):
                print(exc.code, file=sys.stderr)
            _abort_job(code)
        raise
    except BaseException:  # noqa: BLE001 - any failure ends the whole job
        traceback.print_exc()
        _abort_job(1)
        raise


def _abort_job(code: int) -> None:
    """A failed rank ends the whole MPI job at once (mpiexec alone would let the others wait for it
    until their timeout): MPI_Abort, as ``python -m mpi4py`` does, or, before MPI is initialized,
    this rank's death by SIGTERM, which makes mpiexec stop the others."""
    rank = os.environ.get("RANK", "?")
    print(f"torchlean launch: rank {rank} failed (exit code {code}); ending the job", file=sys.stderr, flush=True)
    sys.stdout.flush()
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.COMM_WORLD.Abort(code)
    if os.environ.get("TORCHLEAN_LAUNCH_GROUP") == "1":
        # before MPI is up: MPICH's mpiexec ends the job when a rank dies of a signal, but not when
        # one exits with an error code
        os.kill(os.getpid(), signal.SIGTERM)


if __name__ == "__main__":
    main(sys.argv[1:])
