"""gpuops' storage probe: the models on a host, their sizes, and deleting one carefully.

Like ``reporter.py`` this file is sent as source to a host and run there with the
host's python (``python -c SOURCE --gpuops-storage-probe MODE ...``), so it stays
standalone: standard library only, nothing from gpuops. gpuops imports it too, for
its constants. Output: one JSON document on stdout.

Modes::

    scan   --model-dir D ... --forbidden F ...
        {"v": 1, "hf_cache": PATH, "mounts": [{"mount", "total_bytes", "free_bytes", "paths"}],
         "models": [{"id", "path", "realpath", "kind": "dir"|"hf-cache", "size_bytes",
                     "disk_bytes", "modified", "complete", "used_by": [{"pid", "command"}],
                     "forbidden": null|F,
                     "refusal": null|{"rule", "message"}}],
         "skipped": [PATH, ...]}

    resolve --id OWNER/NAME
        {"v": 1, "id", "path": SNAPSHOT|null, "folder": ENTRY}: where a repo id lies in the HF
        cache (its snapshot folder, null while there is none; the models--owner--name folder)

    check --path P | --id OWNER/NAME
        {"v": 1, "path", "exists", "complete": true|false|null, "size_bytes"}: whether a model
        folder (or a repo id's HF cache entry) holds its whole checkpoint: every shard its index
        names, as long as its header says, and no ``.incomplete`` file of a download under it
        (null: the folder says nothing about its weights)

    delete --model-dir D ... --forbidden F ... --kind dir|hf-cache --path P [--id ID]
        {"v": 1, "ok": true, "path", "freed_bytes"}
        {"v": 1, "ok": false, "rule", "message", "used_by": [...]}
      Everything is checked again here, on the host, after resolving symlinks with
      realpath: a path is removed only when it is a model under one of the model dirs
      or a ``models--owner--name`` folder of the HF hub cache and no process uses it (a
      model under a forbidden path may be removed: forbidden means nothing new goes there). The removal itself goes by file descriptor from
      that model dir (or the hub cache), never following a symlink: a folder swapped for
      a symlink meanwhile stops it (rule ``symlink-escapes`` or ``changed`` when nothing
      was removed yet, ``failed`` after), and nothing outside the root is touched.

Sizes: ``size_bytes`` is the apparent size (``st_size``), ``disk_bytes`` what the blocks
take (``st_blocks * 512``); both count every file (inode) once, so the symlinks of an HF
snapshot and its blobs are one copy. Times are RFC 3339 UTC.
"""

import errno
import json
import os
import stat
import struct
import sys
import time

MARKER = "--gpuops-storage-probe"
MAX_DEPTH = 3  # model folders are found at most this deep under a model dir
_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-")
_HEADER_LIMIT = 100 * 1024 * 1024  # a safetensors header bigger than this is not believed
_COMMAND_LIMIT = 500


# ---------------------------------------------------------------- paths


def hf_hub_cache(environ=None):
    """Where huggingface_hub keeps its cache, with the same variables and defaults (``~`` is the
    HOME of ``environ``, this process's when it is not given)."""
    env = os.environ if environ is None else environ

    def expand(p):
        if p == "~" or p.startswith("~/"):
            home = env.get("HOME") if environ is not None else None
            return (home + p[1:]) if home else os.path.expanduser(p)
        return p

    hub = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if not hub:
        home = env.get("HF_HOME")
        if not home:
            home = os.path.join(env.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
        hub = os.path.join(expand(home), "hub")
    return os.path.normpath(expand(hub))


def _is_under(path, root, strictly=False):
    if path == root:
        return not strictly
    return path.startswith(root.rstrip("/") + "/")


def _rfc3339(ts):
    if ts is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _encodable(path):
    try:
        path.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


class Roots:
    """The places gpuops manages on this host, literal and resolved."""

    def __init__(self, model_dirs, forbidden, hub):
        self.model_dirs = [os.path.normpath(d) for d in model_dirs]
        self.model_reals = [os.path.realpath(d) for d in self.model_dirs]
        self.hub = hub
        self.hub_real = os.path.realpath(hub)
        # a forbidden path never receives a model; the models already there (a retiring volume
        # that is also a model dir) are listed and may be deleted
        self.forbidden = [(os.path.normpath(f), os.path.realpath(f)) for f in forbidden]

    def forbidden_for(self, path):
        """The forbidden_paths entry ``path`` is under (None: not under one)."""
        real = os.path.realpath(path)
        for literal, resolved in self.forbidden:
            if _is_under(real, resolved) or _is_under(path, literal):
                return literal
        return None

    def describe(self):
        dirs = ", ".join(self.model_dirs) or "none"
        return "model_dirs (%s) or the HF hub cache (%s)" % (dirs, self.hub)


def refusal(roots, path, kind):
    """None when ``path`` may be removed by gpuops, else {"rule", "message"} (policy only:
    whether a process uses it is checked apart)."""

    def no(rule, message):
        return {"rule": rule, "message": message}

    path = os.path.normpath(path)
    if not os.path.isabs(path):
        return no("outside-model-dirs", "%s is not an absolute path" % path)
    if not os.path.lexists(path):
        return no("missing", "%s no longer exists" % path)
    real = os.path.realpath(path)
    if kind == "hf-cache":
        inside = os.path.dirname(real) == roots.hub_real and os.path.basename(real).startswith("models--")
        literally = os.path.dirname(path) in (roots.hub, roots.hub_real)
    elif kind == "dir":
        inside = any(_is_under(real, r, strictly=True) for r in roots.model_reals)
        literally = any(_is_under(path, d, strictly=True) for d in roots.model_dirs + roots.model_reals)
    else:
        return no("not-a-model", "unknown kind %r" % (kind,))
    if not inside:
        if literally:
            return no(
                "symlink-escapes",
                "%s resolves to %s, outside the host's %s" % (path, real, roots.describe()),
            )
        return no("outside-model-dirs", "%s is not under the host's %s" % (path, roots.describe()))
    for managed in roots.model_reals + [roots.hub_real]:
        if _is_under(managed, real):
            return no("holds-managed-root", "%s holds %s, a place gpuops manages" % (path, managed))
    if kind == "dir" and not os.path.isfile(os.path.join(real, "config.json")):
        return no("not-a-model", "%s holds no config.json" % path)
    if kind == "hf-cache" and not (
        os.path.isdir(os.path.join(real, "snapshots")) or os.path.isdir(os.path.join(real, "blobs"))
    ):
        return no("not-a-model", "%s is not a huggingface_hub cache entry" % path)
    return None


# ---------------------------------------------------------------- processes


def _ancestors():
    pids = set()
    pid = os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            with open("/proc/%d/stat" % pid) as f:
                stat_line = f.read()
            pid = int(stat_line.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def _is_gpuops(raw):
    """gpuops itself (``gpuops models rm PATH`` names the path it removes; it does not use it)."""
    argv = [a for a in raw.split("\0") if a][:3]
    for i, arg in enumerate(argv):
        if os.path.basename(arg) == "gpuops":
            return True
        if arg == "-m" and i + 1 < len(argv) and argv[i + 1].split(".")[0] == "gpuops":
            return True
    return False


def processes():
    """[(pid, raw NUL-separated cmdline)] of every process but this probe, its callers and
    gpuops itself."""
    skip = _ancestors()
    out = []
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if not name.isdigit() or int(name) in skip:
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                raw = f.read().decode("utf-8", "replace")
        except OSError:
            continue
        if not raw or MARKER in raw or _is_gpuops(raw):
            continue
        out.append((int(name), raw))
    return out


def mentions(cmdline, needle):
    """Whether ``needle`` (a path or repo id) appears in ``cmdline`` as a whole name:
    ``/m/qwen`` is in ``--model-path=/m/qwen/`` but not in ``/m/qwen122`` or ``/x/m/qwen``."""
    if not needle:
        return False
    start = 0
    while True:
        i = cmdline.find(needle, start)
        if i < 0:
            return False
        before = cmdline[i - 1] if i > 0 else ""
        end = i + len(needle)
        after = cmdline[end] if end < len(cmdline) else ""
        if before not in _NAME_CHARS and before != "/" and (after == "" or after not in _NAME_CHARS):
            return True
        start = i + 1


# the flags through which a server is given the model it loads (the first engine's, and the common others)
MODEL_FLAGS = ("--model-path", "--model", "--tokenizer-path", "--tokenizer")


def model_args(argv):
    """The values a command line gives as the model to load (``--model-path X``, ``--model=X``):
    a ``--served-model-name`` that happens to equal a repo id loads nothing."""
    out = []
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag not in MODEL_FLAGS:
            continue
        if eq:
            out.append(value)
        elif i + 1 < len(argv):
            out.append(argv[i + 1])
    return out


def _under(path, roots):
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots if r)


def _files_of(pid):
    """The files process ``pid`` holds: its open descriptors and its mapped files (None when
    they cannot be read: another user's process, or it left)."""
    found = set()
    readable = False
    fd_dir = "/proc/%d/fd" % pid
    try:
        for fd in os.listdir(fd_dir):
            try:
                found.add(os.readlink(os.path.join(fd_dir, fd)))
            except OSError:
                pass
        readable = True
    except OSError:
        pass
    try:
        with open("/proc/%d/maps" % pid) as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    name = parts[5].rstrip("\n")
                    found.add(name[:-len(" (deleted)")] if name.endswith(" (deleted)") else name)
        readable = True
    except OSError:
        pass
    return found if readable else None


def _hub_of(pid):
    """The HF hub cache process ``pid`` reads, from its environment (None: unreadable)."""
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            raw = f.read().decode("utf-8", "replace")
    except OSError:
        return None
    env = dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)
    if "HOME" not in env and not (env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE") or env.get("HF_HOME")):
        return None
    hub = hf_hub_cache(env)
    return hub


def uses(pid, raw, model):
    """Whether process ``pid`` (command line ``raw``) really uses ``model``: it holds one of the
    copy's files open or mapped, or loads it: for a folder, a command-line argument that is the
    folder or a path inside it; for an HF cache entry, the repo id given as the model to load
    (``--model-path ID``) to a process whose hub cache is this one (as far as can be read)."""
    places = [p for p in (model["path"], model.get("realpath")) if p]
    files = _files_of(pid)
    if files is not None and any(_under(f, places) for f in files):
        return True
    argv = [a for a in raw.split("\0") if a]
    if model["kind"] == "dir":
        return any(mentions(raw, p) for p in places)
    if model["id"] not in model_args(argv):
        return False
    hub = _hub_of(pid)
    if hub is None:
        return True  # its cache cannot be read: it may be this one
    entry = os.path.join(hub, os.path.basename(os.path.normpath(model["path"])))
    return entry in places or os.path.realpath(entry) in places


def users(procs, model):
    found = []
    for pid, raw in procs:
        if uses(pid, raw, model):
            command = " ".join(part for part in raw.split("\0") if part)[:_COMMAND_LIMIT]
            found.append({"pid": pid, "command": command})
    return found


# ---------------------------------------------------------------- sizes and completeness


class Tally:
    """Bytes of files, each inode once."""

    def __init__(self):
        self.seen = set()
        self.size = 0
        self.disk = 0
        self.newest = None
        self.incomplete = False

    def add(self, st):
        key = (st.st_dev, st.st_ino)
        if key in self.seen:
            return
        self.seen.add(key)
        self.size += st.st_size
        self.disk += getattr(st, "st_blocks", 0) * 512
        if self.newest is None or st.st_mtime > self.newest:
            self.newest = st.st_mtime


def _walk_files(top, tally):
    """Every file under ``top`` into ``tally``. File symlinks are followed (each target
    counted once: an HF snapshot's links and its blobs are one copy); symlinks to
    directories are not (a link to / would count the whole machine)."""
    seen_dirs = set()
    stack = [top]
    while stack:
        d = stack.pop()
        try:
            dst = os.stat(d)
        except OSError:
            continue
        if (dst.st_dev, dst.st_ino) in seen_dirs:
            continue
        seen_dirs.add((dst.st_dev, dst.st_ino))
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                    continue
                if e.is_symlink():
                    st = os.stat(e.path)
                    if stat.S_ISDIR(st.st_mode):
                        continue
                else:
                    st = e.stat(follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode):
                    continue
            except OSError:
                continue  # a dangling symlink, or a file gone meanwhile
            if e.name.endswith(".incomplete"):
                tally.incomplete = True
            tally.add(st)


def safetensors_ok(path):
    """Exists, non-empty and as long as its header says (a download cut short is not)."""
    try:
        size = os.stat(path).st_size
        if size <= 8:
            return False
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            if n > _HEADER_LIMIT or 8 + n > size:
                return False
            header = json.loads(f.read(n).decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, struct.error):
        return False
    if not isinstance(header, dict):
        return False
    end = 0
    for key, tensor in header.items():
        if key == "__metadata__":
            continue
        try:
            end = max(end, int(tensor["data_offsets"][1]))
        except (TypeError, KeyError, IndexError, ValueError):
            return False
    return size == 8 + n + end


def weights_complete(folder):
    """True/False from ``model.safetensors.index.json`` (or a lone ``model.safetensors``);
    None when the folder says nothing about its weights."""
    index = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(index):
        try:
            with open(index) as f:
                weight_map = json.load(f)["weight_map"]
            shards = sorted(set(weight_map.values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return False
        if not shards:
            return False
        for shard in shards:
            if not isinstance(shard, str) or shard.startswith("/") or ".." in shard.split("/"):
                return False
            if not safetensors_ok(os.path.join(folder, shard)):
                return False
        return True
    single = os.path.join(folder, "model.safetensors")
    if os.path.exists(single):
        return safetensors_ok(single)
    return None


# ---------------------------------------------------------------- finding models


def _model_folders(model_dir, skip_reals):
    """Folders holding config.json under ``model_dir``, depth 1..MAX_DEPTH. A model's own
    subfolders are not searched; nor are dot folders, HF cache entries and the hub."""
    found = []
    seen = set()

    def visit(path, depth):
        try:
            st = os.stat(path)
        except OSError:
            return
        if (st.st_dev, st.st_ino) in seen:
            return
        seen.add((st.st_dev, st.st_ino))
        if os.path.realpath(path) in skip_reals:
            return
        if depth > 0 and os.path.isfile(os.path.join(path, "config.json")):
            found.append(path)
            return
        if depth >= MAX_DEPTH:
            return
        try:
            names = sorted(os.listdir(path))
        except OSError:
            return
        for name in names:
            if name.startswith(".") or name.startswith(("models--", "datasets--", "spaces--")):
                continue
            child = os.path.join(path, name)
            if os.path.isdir(child):
                visit(child, depth + 1)

    visit(model_dir, 0)
    return found


def dir_model(path, roots):
    tally = Tally()
    _walk_files(path, tally)
    complete = weights_complete(path)
    if tally.incomplete:
        complete = False
    if tally.newest is None:
        try:
            tally.newest = os.stat(path).st_mtime
        except OSError:
            pass
    return {
        "id": path,
        "path": path,
        "realpath": os.path.realpath(path),
        "kind": "dir",
        "size_bytes": tally.size,
        "disk_bytes": tally.disk,
        "modified": _rfc3339(tally.newest),
        "complete": complete,
        "forbidden": roots.forbidden_for(path),
        "refusal": refusal(roots, path, "dir"),
    }


def _snapshot(folder):
    """The snapshot refs/main names, else the newest one; None when there is none."""
    snaps = os.path.join(folder, "snapshots")
    try:
        with open(os.path.join(folder, "refs", "main")) as f:
            rev = f.read().strip()
        if rev and "/" not in rev and os.path.isdir(os.path.join(snaps, rev)):
            return os.path.join(snaps, rev)
    except OSError:
        pass
    try:
        revs = [os.path.join(snaps, r) for r in os.listdir(snaps)]
    except OSError:
        return None
    revs = [r for r in revs if os.path.isdir(r)]
    return max(revs, key=lambda r: os.stat(r).st_mtime) if revs else None


def hf_model(folder, roots):
    repo_id = os.path.basename(folder).split("--", 1)[1].replace("--", "/")
    tally = Tally()
    _walk_files(folder, tally)
    snap = _snapshot(folder)
    complete = weights_complete(snap) if snap else None
    if tally.incomplete:
        complete = False
    return {
        "id": repo_id,
        "path": folder,
        "realpath": os.path.realpath(folder),
        "kind": "hf-cache",
        "size_bytes": tally.size,
        "disk_bytes": tally.disk,
        "modified": _rfc3339(tally.newest),
        "complete": complete,
        "forbidden": roots.forbidden_for(folder),
        "refusal": refusal(roots, folder, "hf-cache"),
    }


def mounts(paths):
    """The filesystems holding ``paths`` (the nearest existing folder of each)."""
    by_mount = {}
    order = []
    for p in paths:
        existing = p
        while not os.path.exists(existing) and existing != "/":
            existing = os.path.dirname(existing)
        mount = os.path.realpath(existing)
        while not os.path.ismount(mount) and mount != "/":
            mount = os.path.dirname(mount)
        if mount not in by_mount:
            try:
                st = os.statvfs(mount)
            except OSError:
                continue
            by_mount[mount] = {
                "mount": mount,
                "total_bytes": st.f_blocks * st.f_frsize,
                "free_bytes": st.f_bavail * st.f_frsize,
                "paths": [],
            }
            order.append(mount)
        if p not in by_mount[mount]["paths"]:
            by_mount[mount]["paths"].append(p)
    return [by_mount[m] for m in order]


def scan(model_dirs, forbidden):
    hub = hf_hub_cache()
    roots = Roots(model_dirs, forbidden, hub)
    models, skipped = [], []
    listed = set()
    for d in roots.model_dirs:
        for path in _model_folders(d, {roots.hub_real}):
            if not _encodable(path):
                skipped.append(path.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
                continue
            if path in listed:
                continue
            listed.add(path)
            models.append(dir_model(path, roots))
    try:
        names = sorted(os.listdir(hub))
    except OSError:
        names = []
    for name in names:
        folder = os.path.join(hub, name)
        if not name.startswith("models--") or len(name) <= len("models--"):
            continue
        if not os.path.isdir(folder):
            continue
        if not _encodable(folder):
            skipped.append(folder.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
            continue
        models.append(hf_model(folder, roots))
    procs = processes()
    for m in models:
        m["used_by"] = users(procs, m)
    return {
        "v": 1,
        "hf_cache": hub,
        "mounts": mounts(list(roots.model_dirs) + [hub]),
        "models": models,
        "skipped": skipped,
    }


# ---------------------------------------------------------------- deleting
#
# A model is removed by file descriptor, from the allowed root that holds it: the root (a
# resolved model dir, or the hub cache) is opened without following a symlink, then each
# component down to the model folder, each checked to be the folder lstat saw just before;
# inside, every entry is removed relative to its folder's fd, symlinks as links, and each
# subfolder is checked again before it is entered. A folder swapped for a symlink (or for
# another folder) on the way stops the delete: nothing outside the root can be reached.

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class Changed(Exception):
    """Something on the way was swapped or replaced since it was looked at."""

    def __init__(self, message, symlink=False):
        Exception.__init__(self, message)
        self.symlink = symlink


def _one_line(text):
    return "".join(c if c.isprintable() else "\\x%02x" % ord(c) if ord(c) < 256 else "\\u%04x" % ord(c)
                   for c in text)


def _same(a, b):
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _open_dir(parent_fd, name, where, before=None):
    """An fd on folder ``name`` of ``parent_fd`` (None: ``name`` is a path), opened without
    following a symlink and checked to be the folder ``before`` (an lstat taken just before,
    here if not given). Raises Changed, or OSError for other failures."""
    if before is None:
        try:
            before = os.lstat(name, dir_fd=parent_fd)
        except FileNotFoundError:
            raise Changed("%s is gone" % where) from None
    if stat.S_ISLNK(before.st_mode):
        raise Changed("%s is now a symlink" % where, symlink=True)
    if not stat.S_ISDIR(before.st_mode):
        raise Changed("%s is no longer a folder" % where)
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
            raise Changed("%s was replaced while being opened" % where, symlink=exc.errno == errno.ELOOP) from None
        raise
    try:
        after = os.fstat(fd)
    except OSError:
        os.close(fd)
        raise
    if not _same(before, after) or not stat.S_ISDIR(after.st_mode):
        os.close(fd)
        raise Changed("%s was replaced while being opened" % where)
    return fd


def _open_chain(root, folder):
    """(fd of the parent of ``folder``, fd of ``folder``): ``folder`` is ``root`` or under it
    (both resolved), reached from ``root`` one component at a time (for ``root`` itself the
    parent is None)."""
    rel = os.path.relpath(folder, root)
    parts = [] if rel == "." else rel.split(os.sep)
    for name in parts:
        if name in ("", ".", ".."):
            raise Changed("%s is not under %s" % (folder, root))
    parent, fd = None, _open_dir(None, root, root)
    where = root
    try:
        for name in parts:
            where = os.path.join(where, name)
            child = _open_dir(fd, name, where)
            if parent is not None:
                os.close(parent)
            parent, fd = fd, child
    except BaseException:
        for f in (parent, fd):
            if f is not None:
                os.close(f)
        raise
    return parent, fd


def _rmdir_checked(parent_fd, name, fd, where):
    """Remove the emptied folder ``name`` of ``parent_fd`` if it is still the one open as ``fd``."""
    try:
        now = os.lstat(name, dir_fd=parent_fd)
    except FileNotFoundError:
        return
    if not _same(now, os.fstat(fd)):
        raise Changed("%s was replaced during the delete" % where, symlink=stat.S_ISLNK(now.st_mode))
    os.rmdir(name, dir_fd=parent_fd)


def _remove_tree(top_fd, top_where, tally, errors, removed=None):
    """Remove everything inside the folder open as ``top_fd`` (the folder itself stays), by fd:
    a symlink is unlinked as a link (its target untouched), a subfolder is opened without
    following a symlink and checked before it is entered. Each regular file removed goes into
    ``tally``, failures into ``errors``, the count of entries removed into ``removed[0]``.
    Raises Changed on a swap."""
    removed = [0] if removed is None else removed

    def names(fd, where):
        try:
            return sorted(os.listdir(fd), reverse=True)
        except OSError as exc:
            errors.append("%s: %s" % (where, exc.strerror or exc))
            return []

    stack = [(top_fd, names(top_fd, top_where), top_where, None)]
    try:
        while stack:
            fd, left, where, name_in_parent = stack[-1]
            if not left:
                stack.pop()
                if stack:  # a subfolder, now empty
                    try:
                        _rmdir_checked(stack[-1][0], name_in_parent, fd, where)
                        removed[0] += 1
                    except OSError as exc:
                        errors.append("%s: %s" % (where, exc.strerror or exc))
                    finally:
                        os.close(fd)
                continue
            name = left.pop()
            child = os.path.join(where, name)
            try:
                st = os.lstat(name, dir_fd=fd)
            except FileNotFoundError:
                continue
            except OSError as exc:
                errors.append("%s: %s" % (child, exc.strerror or exc))
                continue
            if stat.S_ISDIR(st.st_mode):
                try:
                    sub = _open_dir(fd, name, child, before=st)
                except OSError as exc:
                    errors.append("%s: %s" % (child, exc.strerror or exc))
                    continue
                stack.append((sub, names(sub, child), child, name))
                continue
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                continue
            except OSError as exc:
                errors.append("%s: %s" % (child, exc.strerror or exc))
                continue
            removed[0] += 1
            if stat.S_ISREG(st.st_mode):
                tally.add(st)
    finally:
        for fd, _, _, _ in stack[1:]:
            os.close(fd)


def _root_for(roots, folder, kind):
    """The allowed root (resolved) holding ``folder`` (resolved), the nearest; None if none."""
    candidates = [roots.hub_real] if kind == "hf-cache" else roots.model_reals
    held = [r for r in candidates if _is_under(folder, r)]
    return max(held, key=len) if held else None


def _close(*fds):
    for fd in fds:
        if fd is not None:
            os.close(fd)


def _unlink_link(roots, path, errors):
    """Remove the symlink ``path`` (the literal path given to delete), by fd from the root
    holding its folder; a link whose folder is outside every root is left (and said)."""
    folder = os.path.realpath(os.path.dirname(path))
    name = os.path.basename(path)
    root = _root_for(roots, folder, "dir") or _root_for(roots, folder, "hf-cache")
    if root is None:
        errors.append("%s: the link was left: its folder %s is outside the host's %s" % (path, folder, roots.describe()))
        return
    parent = fd = None
    try:
        parent, fd = _open_chain(root, folder)
        if stat.S_ISLNK(os.lstat(name, dir_fd=fd).st_mode):
            os.unlink(name, dir_fd=fd)
    except FileNotFoundError:
        pass
    except (Changed, OSError) as exc:
        errors.append("%s: %s" % (path, getattr(exc, "strerror", None) or exc))
    finally:
        _close(parent, fd)


def _remove_locks(roots, real):
    """huggingface_hub's lock files of the repo: ``.locks/models--o--n`` in the hub cache, by fd."""
    parent = fd = sub = None
    try:
        parent, fd = _open_chain(roots.hub_real, roots.hub_real)
        name = os.path.basename(real)
        locks = _open_dir(fd, ".locks", os.path.join(roots.hub_real, ".locks"))
        try:
            sub = _open_dir(locks, name, os.path.join(roots.hub_real, ".locks", name))
            _remove_tree(sub, name, Tally(), [])
            _rmdir_checked(locks, name, sub, name)
        finally:
            _close(sub, locks)
    except (Changed, OSError):
        pass  # lock files are not the model: whatever stays there is harmless
    finally:
        _close(parent, fd)


def delete(model_dirs, forbidden, kind, path, repo_id):
    roots = Roots(model_dirs, forbidden, hf_hub_cache())
    path = os.path.normpath(path)

    def no(rule, message):
        return {"v": 1, "ok": False, "rule": rule, "used_by": [], "message": _one_line(message)}

    try:
        refused = refusal(roots, path, kind)
        real = os.path.realpath(path)
    except OSError as exc:  # realpath raises when a link on the way goes while it reads it
        return no("changed", "%s changed while being checked (%s); nothing was removed" % (path, exc.strerror or exc))
    if refused:
        return dict(refused, v=1, ok=False, used_by=[])
    in_use = users(processes(), {"path": path, "realpath": real, "kind": kind, "id": repo_id or ""})
    if in_use:
        pids = ", ".join("%d (%s)" % (u["pid"], u["command"][:80]) for u in in_use)
        return {"v": 1, "ok": False, "rule": "in-use", "used_by": in_use,
                "message": _one_line("%s is in use by pid %s" % (path, pids))}

    def swapped(exc):  # before anything was removed
        return no("symlink-escapes" if exc.symlink else "changed",
                  "%s changed since it was checked: %s; nothing was removed" % (path, exc))

    try:
        checked = os.stat(real)  # the folder the checks above looked at
        link = os.lstat(path)
    except FileNotFoundError:
        return no("missing", "%s no longer exists; nothing was removed" % path)
    except OSError as exc:
        return no("failed", "could not remove %s: %s" % (path, exc))
    root = _root_for(roots, real, kind)
    if root is None or root == real:  # refusal() said otherwise a moment ago
        return no("changed", "%s changed since it was checked; nothing was removed" % path)
    try:
        parent, fd = _open_chain(root, real)
    except Changed as exc:
        return swapped(exc)
    except OSError as exc:
        return no("failed", "could not remove %s: %s; nothing was removed" % (path, exc))
    tally = Tally()
    errors = []
    removed = [0]
    try:
        if not _same(os.fstat(fd), checked):
            return swapped(Changed("%s is another folder now" % real))
        _remove_tree(fd, real, tally, errors, removed)
        _rmdir_checked(parent, os.path.basename(real), fd, real)
        try:
            os.lstat(os.path.basename(real), dir_fd=parent)
            errors.append("%s: still there" % real)
        except FileNotFoundError:
            pass
    except Changed as exc:
        if not removed[0]:
            return swapped(exc)
        return no("failed", "stopped removing %s: %s; nothing outside %s was touched" % (path, exc, root))
    except OSError as exc:
        errors.append("%s: %s" % (real, exc.strerror or exc))
    finally:
        _close(parent, fd)
    if stat.S_ISLNK(link.st_mode):
        _unlink_link(roots, path, errors)
    if kind == "hf-cache":
        _remove_locks(roots, real)
    if errors:
        return no("failed", "could not remove all of %s: %s" % (path, "; ".join(errors[:3])))
    return {"v": 1, "ok": True, "path": path, "freed_bytes": tally.disk, "size_bytes": tally.size}


def resolve(repo_id):
    """The snapshot folder of ``repo_id`` in this host's HF hub cache (what a server given the repo
    id loads), so a client reads its tokenizer from the disk instead of asking the Hub."""
    folder = os.path.join(hf_hub_cache(), "models--" + repo_id.replace("/", "--"))
    snap = _snapshot(folder) if repo_id.count("/") == 1 and os.path.isdir(folder) else None
    return {"v": 1, "id": repo_id, "path": snap, "folder": folder}


def check(path, repo_id):
    """Whether a download into ``path`` (or of ``repo_id`` into the HF cache) is complete."""
    if repo_id:
        path = os.path.join(hf_hub_cache(), "models--" + repo_id.replace("/", "--"))
    if not path or not os.path.isdir(path):
        return {"v": 1, "path": path, "exists": False, "complete": False, "size_bytes": 0}
    tally = Tally()
    _walk_files(path, tally)
    if repo_id:
        snap = _snapshot(path)
        complete = weights_complete(snap) if snap else False
    else:
        complete = weights_complete(path)
    if tally.incomplete:
        complete = False
    return {"v": 1, "path": path, "exists": True, "complete": complete, "size_bytes": tally.size}


# ---------------------------------------------------------------- main


def main(argv):
    args = list(argv)
    if args and args[0] == MARKER:
        args.pop(0)
    if not args or args[0] not in ("scan", "delete", "resolve", "check"):
        sys.stderr.write("storage probe: expected scan, delete, resolve or check\n")
        return 2
    mode = args.pop(0)
    model_dirs, forbidden = [], []
    kind = path = repo_id = None
    while args:
        arg = args.pop(0)
        if not args:
            sys.stderr.write("storage probe: %s needs a value\n" % arg)
            return 2
        value = args.pop(0)
        if arg == "--model-dir":
            model_dirs.append(value)
        elif arg == "--forbidden":
            forbidden.append(value)
        elif arg == "--kind":
            kind = value
        elif arg == "--path":
            path = value
        elif arg == "--id":
            repo_id = value
        else:
            sys.stderr.write("storage probe: unknown argument %r\n" % arg)
            return 2
    if mode == "scan":
        doc = scan(model_dirs, forbidden)
    elif mode == "resolve":
        doc = resolve(repo_id or "")
    elif mode == "check":
        doc = check(path, repo_id)
    else:
        if kind not in ("dir", "hf-cache") or not path:
            sys.stderr.write("storage probe: delete needs --kind dir|hf-cache and --path\n")
            return 2
        doc = delete(model_dirs, forbidden, kind, path, repo_id)
    sys.stdout.write(json.dumps(doc, separators=(",", ":")) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
