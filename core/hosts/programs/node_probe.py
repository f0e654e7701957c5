"""What a node of a multi-node deployment says: its network interfaces, and a TCP connect.

    python -c SOURCE HOST PORT IFACE

Prints ``{"ifaces": [names]|null, "connect": "ok"|"refused"|"timeout"|"error: …"}`` for a connect
to HOST:PORT (the rendezvous). Standard library only, Python 3.6 and newer.
"""

import json
import os
import socket
import sys


def main(host, port, _iface):
    out = {"ifaces": sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else None}
    try:
        with socket.create_connection((host.strip("[]"), port), timeout=3):
            out["connect"] = "ok"
    except ConnectionRefusedError:
        out["connect"] = "refused"
    except socket.timeout:
        out["connect"] = "timeout"
    except OSError as e:
        out["connect"] = "error: %s" % (e.strerror or e)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
