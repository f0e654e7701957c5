"""Free space of folders on the host, measured at each one's nearest existing ancestor.

    python -c SOURCE DIR...

Prints ``{DIR: free bytes}`` as one JSON object (a folder whose space cannot be read is left out).
Standard library only, Python 3.6 and newer.
"""

import json
import os
import sys


def main(dirs):
    out = {}
    for d in dirs:
        p = d
        while p and not os.path.isdir(p):
            p = os.path.dirname(p.rstrip("/")) or "/"
            if p == "/" and not os.path.isdir(p):
                break
        try:
            st = os.statvfs(p)
            out[d] = st.f_bavail * st.f_frsize
        except OSError:
            pass
    sys.stdout.write(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
