"""Prints the host's installed sglang version (package metadata first: no import of the server stack).

    python -c SOURCE

Exits 3 when sglang is not installed for this python. Standard library only, Python 3.6 and newer
(``importlib.metadata`` is 3.8's: older pythons fall back to importing sglang).
"""

import sys


def main():
    try:
        from importlib.metadata import version
        v = version("sglang")
    except Exception:
        try:
            import sglang
            v = sglang.__version__
        except Exception:
            sys.exit(3)
    sys.stdout.write(v)


if __name__ == "__main__":
    main()
