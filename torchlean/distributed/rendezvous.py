"""The one exchange torchlean does itself: rank 0 hands a few bytes (NCCL's unique id) to every
other rank over TCP at ``MASTER_ADDR:MASTER_PORT``, for jobs started without MPI. Everything
after it goes through NCCL. Rank 0 listens; the others connect (retrying while rank 0 is not up
yet); each asks with its rank and receives the bytes. The whole exchange has the process
group's deadline."""

from __future__ import annotations

import socket
import struct
import time

from .common import DistTimeoutError, DistributedError

__all__ = ["share_from_rank0"]


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("connection closed")
        out += chunk
    return out


def share_from_rank0(payload: bytes | None, rank: int, world: int, addr: str, port: int, timeout_s: float,
                     op: str = "init_process_group") -> bytes:
    """Rank 0 passes ``payload``; every rank returns it."""
    deadline = time.monotonic() + timeout_s
    if rank == 0:
        assert payload is not None
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            srv.bind(("", port))
        except OSError as exc:
            srv.close()
            raise DistributedError(f"{op}: rank 0 cannot listen on port {port} (MASTER_PORT): {exc}") from None
        srv.listen(world)
        served: set[int] = set()
        try:
            while len(served) < world - 1:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(range(1, world)) - served)
                    raise DistTimeoutError(f"{op}: ranks {missing} did not connect to rank 0 at port {port} within "
                                           f"{timeout_s:g} s")
                srv.settimeout(left)
                try:
                    conn, _ = srv.accept()
                except socket.timeout:
                    continue
                with conn:
                    conn.settimeout(max(deadline - time.monotonic(), 0.1))
                    (peer,) = struct.unpack("!i", _recv_exact(conn, 4))
                    conn.sendall(struct.pack("!i", len(payload)) + payload)
                    served.add(peer)
        finally:
            srv.close()
        return payload
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise DistTimeoutError(f"{op}: rank {rank} could not reach rank 0 at {addr}:{port} (MASTER_ADDR:"
                                   f"MASTER_PORT) within {timeout_s:g} s")
        try:
            with socket.create_connection((addr, port), timeout=min(left, 5.0)) as sock:
                sock.settimeout(max(deadline - time.monotonic(), 0.1))
                sock.sendall(struct.pack("!i", rank))
                (n,) = struct.unpack("!i", _recv_exact(sock, 4))
                return _recv_exact(sock, n)
        except (ConnectionError, socket.timeout, OSError):
            time.sleep(0.05)
