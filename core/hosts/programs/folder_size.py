"""The summed apparent size of every file under a folder on the host.

    python -c SOURCE FOLDER

Prints the number of bytes (files that vanish meanwhile are skipped). Standard library only, Python
3.6 and newer.
"""

import os
import sys


def main(folder):
    total = 0
    for root, _dirs, files in os.walk(folder):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_size
            except OSError:
                pass
    print(total)


if __name__ == "__main__":
    main(sys.argv[1])
