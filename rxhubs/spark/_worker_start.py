"""Start Spark's streaming-source runner so that it connects back to the JVM before its imports.

Spark 4 runs the driver side of a Python streaming data source (``initialOffset``, ``latestOffset``,
``partitions``, ``commit``) in a fresh process, ``python -m pyspark.sql.streaming.python_streaming_source_runner``,
and gives it 10 s, fixed, to connect back and another 10 s to authenticate (``PythonWorkerFactory.
createSimpleWorker`` and ``SocketAuthHelper.authClient``; no setting changes either). The runner connects only
after importing pyspark, pyarrow and numpy, about half a second of CPU: on a machine loaded enough to stretch
that past 10 s, the query fails to start with "Python worker failed to connect back". Executors' workers come
from Spark's daemon, which waits 60 s, so only this runner meets the limit.

This script imports only the standard library. It makes the same connection first (the protocol of
``pyspark.worker_util.get_sock_file_to_executor``: connect, send the secret, read "ok", send the pid), then
imports the runner and hands it the connection, as the runner's own ``__main__`` does; from then on the JVM
waits for the runner's answers without a deadline. ``_worker_python.sh``, which
:func:`rxhubs.spark.local_session` makes Spark's Python, runs it for that module only.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
from typing import BinaryIO

RUNNER = "pyspark.sql.streaming.python_streaming_source_runner"
_OK = b"ok"


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    if data is None or len(data) != size:
        raise ConnectionError("the JVM closed the connection during the handshake")
    return data


def connect_back() -> tuple[BinaryIO, socket.socket]:
    """Connect to the JVM that started this process and authenticate, as Spark's worker does; send the pid.

    Reads Spark's worker environment: ``PYTHON_WORKER_FACTORY_SOCK_PATH`` (a Unix socket, no secret) or
    ``PYTHON_WORKER_FACTORY_PORT`` and ``PYTHON_WORKER_FACTORY_SECRET``, ``SPARK_AUTH_SOCKET_TIMEOUT``,
    ``SPARK_BUFFER_SIZE`` and ``SPARK_PREFER_IPV6``.
    """
    timeout = int(os.environ.get("SPARK_AUTH_SOCKET_TIMEOUT", 15))
    secret = os.environ.get("PYTHON_WORKER_FACTORY_SECRET")
    path = os.environ.get("PYTHON_WORKER_FACTORY_SOCK_PATH")
    if path is not None and secret is None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        sock.connect(path)
    else:
        host = "::1" if os.environ.get("SPARK_PREFER_IPV6", "false").lower() == "true" else "127.0.0.1"
        sock = socket.create_connection((host, int(os.environ["PYTHON_WORKER_FACTORY_PORT"])), timeout)
    stream: BinaryIO = sock.makefile("rwb", int(os.environ.get("SPARK_BUFFER_SIZE", 65536)))  # type: ignore[assignment]
    if secret is not None:
        token = secret.encode("utf-8")
        stream.write(struct.pack("!i", len(token)) + token)
        stream.flush()
        (length,) = struct.unpack("!i", _read_exactly(stream, 4))
        if length != len(_OK) or _read_exactly(stream, length) != _OK:
            stream.close()
            sock.close()
            raise ConnectionError("the JVM refused this worker's secret")
    sock.settimeout(None)  # the runner's __main__: get_sock_file_to_executor(timeout=None)
    stream.write(struct.pack("!i", os.getpid()))
    stream.flush()
    return stream, sock


def main(argv: list[str]) -> None:
    """``_worker_start.py -m pyspark.sql.streaming.python_streaming_source_runner``: connect, then run it."""
    if argv[:2] != ["-m", RUNNER]:
        raise SystemExit(f"usage: _worker_start.py -m {RUNNER}")
    sys.path[0] = os.getcwd()  # as under ``python -m``: the working folder first, not this script's
    stream, sock = connect_back()
    try:
        from pyspark.sql.streaming import python_streaming_source_runner as runner

        runner.main(stream, stream)
    finally:
        stream.close()
        sock.close()


if __name__ == "__main__":
    main(sys.argv[1:])
