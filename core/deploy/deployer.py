"""From a plan to a ready server, watched: checks, download, launch, phases, quick check.

Every step is an event (state, phase, progress, log, finding) that is stored before it
is shown, so a gpuops that is closed (or killed) and reopened finds the deployment where
it was and reattaches: the server never depends on gpuops staying open.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .download import Download, DownloadError
from ..planning.hostfacts import free_space, sglang_version
from ..hosts.host import Host, HostError, host_python
from .launch import Launcher, ProcessLauncher, SystemdLauncher, new_api_key, read_env_value, remote_home
from ..hosts.procs import process_tree
from ..diagnose.findings import Finding
from ..diagnose.stall import DEFAULT_STALL, Stall, StallWatcher, stall_finding
from .store import Store, utc_now
from ..telemetry.samples import memory_used, snapshot

# How often the watch samples the server's processes and its GPUs' memory (seconds).
POLL_S = 5.0

# argv[1] host, argv[2] port: exit 0 when the port is free to bind
_PORT_FREE = r"""
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind((sys.argv[1], int(sys.argv[2])))
except OSError as e:
    print(e)
    sys.exit(1)
"""

# argv[1] port, argv[2] model name, $GPUOPS_API_KEY from the env file: one short chat completion
_QUICK_CHECK = r"""
import json, os, sys, time, urllib.request
body = json.dumps({"model": sys.argv[2], "max_tokens": 16,
                   "messages": [{"role": "user", "content": "Say hello in five words."}]}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{sys.argv[1]}/v1/chat/completions", data=body,
                             headers={"Content-Type": "application/json"})
key = os.environ.get("GPUOPS_API_KEY")
if key:
    req.add_header("Authorization", "Bearer " + key)
t0 = time.time()
with urllib.request.urlopen(req, timeout=120) as r:
    out = json.load(r)
msg = out["choices"][0]["message"]
print(json.dumps({"seconds": round(time.time() - t0, 3), "content": msg.get("content"),
                  "reasoning": bool(msg.get("reasoning_content")), "usage": out.get("usage")}))
"""


class DeployError(Exception):
    """Deploy refused before anything changed on the host (exit 2), with a one-line reason."""


@dataclass
class DeployEvent:
    kind: str  # "state" | "phase" | "progress" | "log" | "finding" | "checks" | "plan"
    data: dict
    ts: str = field(default_factory=utc_now)

    def to_json(self) -> dict:
        return {"ts": self.ts, "event": self.kind, **self.data}


def launcher_for(host: Host, plan: dict, home: str | None) -> Launcher:
    exec_argv = [plan.get("python") or "python3", "-m", "sglang.launch_server", *plan["argv"]]
    env = dict(plan.get("env") or {})
    if plan.get("launcher") == "systemd":
        return SystemdLauncher(host, plan["name"], exec_argv, env, (plan.get("unit") or {}).get("text") or "")
    assert home is not None
    return ProcessLauncher(host, plan["name"], exec_argv, env, home)


async def open_launcher(host: Host, plan: dict) -> Launcher:
    """The deployment's launcher on `host` (the process launcher lives under the host user's home)."""
    home = None if plan.get("launcher") == "systemd" else await remote_home(host)
    return launcher_for(host, plan, home)


def log_follower(host: Host, launcher: Launcher, journal_dir: str | None = None, *, follow: bool = True,
                 offset: int = 0, cursor: str | None = None) -> Any:
    """The follower of the server's log: its file (process launcher, from byte `offset`) or its
    unit's journal (systemd, after `cursor`)."""
    from .journal import FileFollower, JournalFollower

    if isinstance(launcher, ProcessLauncher):
        return FileFollower(host, launcher.log_path, offset=offset, follow=follow)
    assert isinstance(launcher, SystemdLauncher)
    return JournalFollower(host, launcher.unit, directory=journal_dir, cursor=cursor, follow=follow)


class Deployer:
    def __init__(self, host: Host, plan: dict, store: Store, *, emit: Callable[[DeployEvent], Any],
                 yes: bool = False, ask: Callable[[str], bool] | None = None,
                 stall: dict[str, float] | None = None, hf_token: str | None = None,
                 journal_dir: str | None = None, poll_s: float = POLL_S,
                 clock: Callable[[], float] = time.monotonic):
        self.host = host
        self.plan = plan
        self.name = plan["name"]
        self.store = store
        self.emit_cb = emit
        self.yes = yes
        self.ask = ask
        self.stall = {**DEFAULT_STALL, **(stall or {})}
        self.hf_token = hf_token
        self.journal_dir = journal_dir
        self.state = "planned"
        self.launcher: Launcher | None = None
        self.poll_s = poll_s
        self.clock = clock
        self.stalled: Stall | None = None

    # ---------------------------------------------------------------- events

    def emit(self, kind: str, **data: Any) -> None:
        event = DeployEvent(kind, data)
        if kind != "log":  # log lines live in the log itself; the store keeps what happened
            self.store.add_event(self.name, kind, data, ts=event.ts)
        self.emit_cb(event)

    def set_state(self, state: str, **data: Any) -> None:
        self.state = state
        event = self.store.set_state(self.name, state, **data)
        self.emit_cb(DeployEvent("state", {"state": state, **data}, event.ts))

    # ---------------------------------------------------------------- checks

    async def preflight(self) -> None:
        plan, host = self.plan, self.host
        version = await sglang_version(host)
        if version is None:
            raise DeployError(f"SGLang is not installed on {host.name} (python {plan.get('python')}): "
                              "install it there first")
        port = str(plan["port"])
        bind = bind_host(plan)
        res = await host.run([host_python(host), "-c", _PORT_FREE, bind, port], timeout=30)
        if not res.ok:
            raise DeployError(f"port {port} is in use on {host.name} ({res.stdout.strip()}): choose another --port")
        snap = await snapshot(host)
        busy = [(g.index, p) for g in snap.gpus if g.index in plan["gpu_ids"] for p in g.processes]
        if busy:
            listing = "; ".join(f"GPU{i}: pid {p.pid} {p.user or '?'} {p.command or '?'}" for i, p in busy)
            question = f"the plan's GPUs already run processes: {listing}"
            if not self.yes and not (self.ask and self.ask(question)):
                raise DeployError(question + " (refusing without --yes)")
        model = plan.get("model") or {}
        if plan.get("download_dir") and not plan.get("reuse_existing"):
            free = (await free_space(host, (plan["download_dir"],))).get(plan["download_dir"])
            need = int((model.get("checkpoint_bytes") or 0) * 1.1)
            if free is not None and free < need:
                raise DeployError(f"{plan['download_dir']} on {host.name} has {free / 1e9:.0f} GB free; "
                                  f"the model needs {need / 1e9:.0f} GB")

    # ---------------------------------------------------------------- steps

    async def download(self) -> bool:
        plan = self.plan
        model = plan.get("model") or {}
        if plan.get("reuse_existing") or not plan.get("download_dir"):
            return True
        self.set_state("downloading", model=model.get("id"), into=plan["model_path"])
        home = await remote_home(self.host)
        dl = Download(self.host, model["id"], plan["model_path"], model.get("checkpoint_bytes"),
                      token=self.hf_token, token_file=f"{home}/.local/state/gpuops/deployments/{self.name}/hf.env",
                      stall_after_s=self.stall["download"])
        try:
            async for p in dl.progress():
                self.emit("progress", phase="downloading", done=p.done_bytes, total=p.total_bytes,
                          rate_bps=round(p.rate_bps), eta_s=None if p.eta_s is None else round(p.eta_s, 1))
        except DownloadError as exc:
            stalled = exc.message.startswith("download-stalled")
            self.emit("finding", code="download-stalled" if stalled else "download-failed",
                      severity="error", summary=exc.message, fix={"summary": exc.hint, "applicable": False})
            self.set_state("stalled" if stalled else "crashed", reason=exc.message)
            return False
        return True

    async def launch(self) -> None:
        plan = self.plan
        self.launcher = await open_launcher(self.host, plan)
        secrets_env: dict[str, str] = {}
        if any("${GPUOPS_API_KEY}" in a for a in plan["argv"]):
            env_path = getattr(self.launcher, "env_path")
            secrets_env["GPUOPS_API_KEY"] = (await read_env_value(self.host, env_path, "GPUOPS_API_KEY")
                                             or new_api_key())
        await self.launcher.install(secrets_env)
        await self.launcher.start()
        self.set_state("starting", launcher=self.launcher.kind)

    async def watch(self, *, offset: int = 0, cursor: str | None = None) -> str:
        """Follow the server's log through its phases until ready, crashed or stalled.

        Every ``poll_s`` the server's processes and its GPUs' memory are sampled for the stall
        watcher (:mod:`gpuops.core.diagnose.stall`): a stall is flagged within its threshold plus one
        poll, and only while the processes live and the memory stays flat."""
        from ..diagnose.phases import PhaseEvent, PhaseTracker, Progress, clean
        from ..diagnose.finding_rules import LogScanner

        assert self.launcher is not None
        follower = log_follower(self.host, self.launcher, self.journal_dir, offset=offset, cursor=cursor)
        tracker = PhaseTracker()
        scanner = LogScanner()  # the finding rules' view of the same lines
        watcher = StallWatcher(self.stall, clock=self.clock)
        queue: asyncio.Queue = asyncio.Queue(maxsize=10_000)

        async def read() -> None:
            # a task of its own: a timeout on the queue never cancels the follower mid-line
            async for record in follower.records():
                await queue.put(record)

        reader = asyncio.create_task(read())
        next_poll = self.clock()
        last: tuple[str | None, int | None] = (None, None)  # the last non-empty line, its number
        exited: str | None = None  # the server's processes are gone (status detail)
        try:
            while True:
                try:
                    rec = await asyncio.wait_for(queue.get(), min(1.0, self.poll_s))
                except asyncio.TimeoutError:
                    rec = None
                    tracker.idle()  # a quiet log: lets an inferred ready (no ready line) settle
                    if tracker.outcome == "ready":
                        return "ready"
                if reader.done() and rec is None and queue.empty() and reader.exception():
                    raise reader.exception()  # type: ignore[misc]
                if rec is not None and rec.notice:  # truncated/rotated/missing: say so, parse nothing
                    self.emit("log", line=f"gpuops: log {rec.notice}: {rec.text}")
                    continue
                if rec is not None:
                    self.emit("log", line=rec.text)
                    if rec.text.strip():
                        last = (rec.text, tracker.line_no + 1)
                    line = clean(rec.text)
                    events = tracker.feed(line)
                    scanner.feed(line, tracker)
                    for ev in events:
                        if isinstance(ev, PhaseEvent):
                            watcher.progress(ev.phase)
                            # ready is recorded after the quick check; starting is already the state
                            if ev.phase not in ("ready", self.state):
                                self.set_state(ev.phase, line=ev.text)
                            self.emit("phase", phase=ev.phase, line=ev.text)
                        elif isinstance(ev, Progress):
                            watcher.progress()
                            self.emit("progress", phase=ev.phase, done=ev.done, total=ev.total, what=ev.what)
                    if tracker.outcome == "crashed":
                        await self._crashed(tracker, scanner, queue)
                        return "crashed"
                    if tracker.outcome == "ready":
                        return "ready"
                    if self.clock() < next_poll:
                        continue
                if self.clock() >= next_poll:
                    next_poll = self.clock() + self.poll_s
                    self._remember_position(follower)  # once a poll, not a store write per line
                    if exited is None and not await self._sample(watcher):
                        exited = (await self.launcher.status()).detail
                if exited is not None and rec is None:  # exited, and its log has gone quiet since
                    await self._crashed(tracker, scanner, queue, reason=f"the server exited ({exited})")
                    return "crashed"
                stall = watcher.check()
                if stall is not None:
                    await self._stalled(stall, *last, scanner=scanner, tracker=tracker)
                    return "stalled"
        finally:
            self._remember_position(follower)
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def _sample(self, watcher: StallWatcher) -> bool:
        """Feed the watcher the server's processes and its GPUs' memory; False when the server
        has exited. A reading that fails (NVML, a slow host) leaves the watcher's last one."""
        assert self.launcher is not None
        st = await self.launcher.status()
        if not st.running:
            return False
        if st.pid:
            tree = await process_tree(self.host, st.pid, host_python(self.host))
            watcher.processes(len(tree.pids), len(tree.ranks) or None)
        gpu_ids = set(self.plan.get("gpu_ids") or ())
        try:
            snap = await snapshot(self.host)
        except HostError:
            return True
        used = memory_used(snap.gpus, gpu_ids or None)
        if used:
            watcher.gpus(used)
        return True

    async def _crashed(self, tracker: Any, scanner: Any, queue: asyncio.Queue, reason: str | None = None) -> None:
        """The crash's findings from the rules, over the lines that followed it too (the rest
        of the traceback, the other ranks' errors) as far as they have arrived. `reason`: the
        server exited without a crash the tracker recognised."""
        while not queue.empty():
            rec = queue.get_nowait()
            if not rec.notice:
                self.emit("log", line=rec.text)
                scanner.feed(rec.text, tracker)
        for finding in scanner.findings(tracker, self.plan):
            self.emit("finding", **finding.to_json())
        phase = tracker.crash.phase if tracker.crash else tracker.phase or "starting"
        self.set_state("crashed", phase=phase, **({"reason": reason} if reason else {}))

    async def _stalled(self, stall: Stall, last_line: str | None, last_line_no: int | None, *,
                       scanner: Any = None, tracker: Any = None) -> None:
        """Say the stall (state, finding with its evidence), then triage it on the host: what the
        log's silence suggests, and the host checks (driver/library, P2P, ports, /dev/shm, …)."""
        self.stalled = stall
        self.emit("finding", **stall_finding(stall, last_line, last_line_no).to_json())
        self.set_state("stalled", phase=stall.phase, silent_s=round(stall.silent_s, 1), summary=stall.summary)
        await self.triage(scanner, tracker)

    async def triage(self, scanner: Any = None, tracker: Any = None) -> list[Finding]:
        """Findings beyond the stall itself, emitted and returned: the log rules' (errors in
        the log so far; a silence rule's own nccl-init-stall is left out, the stall finding says
        it with readings) and the host checks' for the running server (their pass/fail list is
        a "checks" event)."""
        from ..diagnose.host_checks import findings, run_checks

        out: list[Finding] = []
        if scanner is not None and tracker is not None:
            out += [f for f in scanner.findings(tracker, self.plan) if f.code != "nccl-init-stall"]
        assert self.launcher is not None
        try:
            st = await self.launcher.status()
            results = await run_checks(self.host, self.plan, server_pids=[st.pid] if st.running and st.pid else [])
        except HostError as exc:
            out.append(Finding("host-error", "warning", f"the host checks could not run: {exc.message}"))
        else:
            self.emit("checks", checks=[r.to_json() for r in results])
            out += findings(results)
        for finding in out:
            self.emit("finding", **finding.to_json())
        return out

    def _remember_position(self, follower: Any) -> None:
        cursor = getattr(follower, "cursor", None)
        offset = getattr(follower, "offset", None)
        if cursor is not None or offset is not None:
            self.store.set_position(self.name, cursor=cursor, log_offset=offset)

    async def quick_check(self) -> dict | None:
        plan = self.plan
        env_path = getattr(self.launcher, "env_path", "")
        served = served_name(plan)
        script = 'set -a; [ -r "$1" ] && . "$1"; set +a; shift; exec "$@"'
        res = await self.host.run(["sh", "-c", script, "gpuops-check", env_path, host_python(self.host), "-c",
                                   _QUICK_CHECK, str(plan["port"]), served], timeout=180)
        if not res.ok:
            self.emit("finding", code="quick-check-failed", severity="warning",
                      summary=(res.stderr.strip().splitlines() or ["no output"])[-1])
            return None
        try:
            return json.loads(res.stdout)
        except ValueError:
            return None

    async def run(self) -> str:
        """The whole deployment; returns the final state (ready, crashed or stalled)."""
        await self.prepare()
        return await self.execute()

    async def prepare(self) -> None:
        """Checks, then the deployment is recorded (DeployError: refused, nothing changed)."""
        await self.preflight()
        self.store.add_deployment(self.name, self.host.name, self.plan)
        self.emit_cb(DeployEvent("state", {"state": "planned", "name": self.name, "host": self.host.name}))

    async def execute(self) -> str:
        try:
            if not await self.download():
                return self.state
            await self.launch()
            outcome = await self.watch()
        except HostError as exc:
            return self._host_error(exc)
        return await self._finish(outcome)

    async def apply_plan(self, new_plan: dict, why: dict) -> str:
        """A fix applied: stop the server, record the new plan (with `why`: the finding's code
        and the diff), install and start it, and watch it come up from where the log ends now."""
        try:
            if self.launcher is None:
                self.launcher = await open_launcher(self.host, self.plan)
            await self.launcher.stop()
            position = await self._log_end()
            self.store.replace_plan(self.name, new_plan, why)
            self.emit_cb(DeployEvent("plan", why))
            self.plan = new_plan
            self.stalled = None
            await self.launch()
            outcome = await self.watch(**position)
        except HostError as exc:
            return self._host_error(exc)
        return await self._finish(outcome)

    async def _log_end(self) -> dict:
        """Where the server's log ends now: a restarted server's watch starts there, so the
        old run's crash is not read again."""
        assert self.launcher is not None
        if isinstance(self.launcher, ProcessLauncher):
            res = await self.host.run(["sh", "-c", 'wc -c < "$1" 2>/dev/null || echo 0', "gpuops-size",
                                       self.launcher.log_path], timeout=15)
            size = res.stdout.strip()
            return {"offset": int(size) if size.isdigit() else 0}
        argv = ["journalctl", "-u", self.launcher.unit, "-n", "1", "-o", "json", "--no-pager"]
        if self.journal_dir:
            argv[1:1] = ["--directory", self.journal_dir]
        res = await self.host.run(argv, timeout=30)
        try:
            return {"cursor": json.loads(res.stdout.strip().splitlines()[-1])["__CURSOR"]}
        except (ValueError, IndexError, KeyError):
            return {}

    def _host_error(self, exc: HostError) -> str:
        self.emit("finding", code="host-error", severity="error", summary=exc.message)
        self.set_state("crashed", reason=exc.message)
        return "crashed"

    async def _finish(self, outcome: str) -> str:
        if outcome != "ready":
            return outcome
        endpoint = f"http://{bind_host(self.plan)}:{self.plan['port']}"
        check = await self.quick_check()
        self.set_state("ready", endpoint=endpoint, model=served_name(self.plan), quick_check=check)
        return "ready"


def bind_host(plan: dict) -> str:
    argv = plan.get("argv") or []
    return argv[argv.index("--host") + 1] if "--host" in argv else "127.0.0.1"


def served_name(plan: dict) -> str:
    argv = plan.get("argv") or []
    if "--served-model-name" in argv:
        return argv[argv.index("--served-model-name") + 1]
    return (plan.get("model") or {}).get("id") or "default"


