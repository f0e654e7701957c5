"""gpuops' log file follower: reads a log file on the host by byte offset, and follows it.

    python -c SOURCE PATH OFFSET FILE_ID FOLLOW MAX_LINE PIECE

Reads PATH from byte OFFSET (FILE_ID "D:I", device:inode, the file that offset is in; "-" for any;
FOLLOW "1" to keep reading as it grows, across truncation and rotation). Prints one JSON value per
line (JSON, so a line cut short by a dropped connection never parses as a whole frame):

    [END, "text"]                a whole line; END is the byte offset just after its newline
    {"c": "text"}                 the first pieces of a long line, its last piece follows as [END, ...]
    {"e": "open", "id": "D:I", "size": N}       the file being read (device:inode)
    {"e": "truncated", "offset": O, "size": N}  size fell below the offset: reading from 0
    {"e": "rotated", "offset": O}               the path now names another file: reading it from 0
    {"e": "missing"}                            no such file yet (follow mode waits for it)
    {"e": "partial", "offset": O, "text": "..."} end of file inside a line (only without follow)

A line longer than MAX_LINE bytes is cut there; a line's text is sent in pieces of at most PIECE
characters. Standard library only, Python 3.6 and newer.
"""

import errno
import json
import os
import sys
import time

out = sys.stdout


def emit(obj):
    out.write(json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n")


def emit_line(end, raw, piece):
    text = raw.decode("utf-8", "replace")
    while len(text) > piece:
        emit({"c": text[:piece]})
        text = text[piece:]
    emit([end, text])


def ident(st):
    return "%d:%d" % (st.st_dev, st.st_ino)


def main(path, off, want, follow, max_line, piece):
    f = None
    buf = b""
    missing_said = False
    draining = False
    idle = 0.02
    while True:
        if f is None:
            try:
                f = open(path, "rb")  # noqa: SIM115 (kept open across polls: a follower, closed on rotation)
            except OSError as e:
                if e.errno != errno.ENOENT or not follow:
                    sys.stderr.write("%s: %s\n" % (path, e.strerror))
                    out.flush()
                    sys.exit(2 if e.errno == errno.ENOENT else 1)
                if not missing_said:
                    emit({"e": "missing"})
                    out.flush()
                    missing_said = True
                time.sleep(0.2)
                continue
            st = os.fstat(f.fileno())
            if want != "-" and want != ident(st) and off > 0:
                emit({"e": "rotated", "offset": off})
                off = 0
            elif off > st.st_size:
                emit({"e": "truncated", "offset": off, "size": st.st_size})
                off = 0
            want = ident(st)
            emit({"e": "open", "id": want, "size": st.st_size})
            out.flush()
            f.seek(off)
            buf = b""
        data = f.read(65536)
        if data:
            idle = 0.02
            buf += data
            start = 0
            while True:
                i = buf.find(b"\n", start)
                if i < 0:
                    break
                emit_line(off + i + 1, buf[start:i], piece)
                start = i + 1
            buf = buf[start:]
            off += start
            while len(buf) >= max_line:
                emit_line(off + max_line, buf[:max_line], piece)
                buf = buf[max_line:]
                off += max_line
            if len(data) < 65536:
                out.flush()
            continue
        out.flush()
        if not follow:
            if buf:
                emit({"e": "partial", "offset": off, "text": buf.decode("utf-8", "replace")})
            out.flush()
            return
        size = os.fstat(f.fileno()).st_size
        if size < off + len(buf):
            emit({"e": "truncated", "offset": off + len(buf), "size": size})
            off = 0
            f.seek(0)
            buf = b""
            out.flush()
            continue
        if draining:  # the old file is read to its end: switch to the new one
            if buf:  # its last line never got its newline
                emit_line(off + len(buf), buf, piece)
            emit({"e": "rotated", "offset": off + len(buf)})
            out.flush()
            f.close()
            f, off, buf, want, draining = None, 0, b"", "-", False
            continue
        try:
            now = ident(os.stat(path))
        except OSError:
            now = want
        if now != want:
            draining = True  # read what was written to the old file meanwhile, then switch
            continue
        time.sleep(idle)
        idle = min(0.1, idle * 2)


if __name__ == "__main__":
    try:
        main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1", int(sys.argv[5]), int(sys.argv[6]))
    except (BrokenPipeError, KeyboardInterrupt):
        pass
