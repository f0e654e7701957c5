"""Hold a TCP port with a real listening socket until killed: `python tests/hold_port.py [PORT] [HOST]`.

For running the suite the way a shared machine does, where something else already serves on the
planner's default port (30000). Prints "listening HOST:PORT pid PID" once the socket listens."""

from __future__ import annotations

import os
import signal
import socket
import sys


def main() -> int:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 30000
    host = sys.argv[2] if len(sys.argv) > 2 else "127.0.0.1"
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAITs of servers that held it before
    s.bind((host, port))
    s.listen(16)
    print(f"listening {host}:{port} pid {os.getpid()}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        conn, _ = s.accept()
        conn.close()


if __name__ == "__main__":
    sys.exit(main())
