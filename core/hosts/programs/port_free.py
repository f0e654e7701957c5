"""Whether a port is free to bind on the host.

    python -c SOURCE HOST PORT

Exits 0 when HOST:PORT can be bound, else prints why and exits 1. Standard library only, Python 3.6
and newer.
"""

import socket
import sys


def main(host, port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind((host, int(port)))
    except OSError as e:
        print(e)
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
