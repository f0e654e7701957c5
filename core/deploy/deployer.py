"""From a plan to a running server: the checks before anything changes, the download, the launch.

The steps are the use case's (:mod:`gpuops.core.ops`): :meth:`Deployer.preflight` refuses with a
:class:`DeployError` (exit 2) before anything changed on the host; :meth:`Deployer.download`
fetches the weights on the host with progress; :meth:`Deployer.launch` installs and starts the
server and begins its run's log where the log ends now. From there the deployment's one
:class:`~gpuops.core.deploy.watch.Watch` takes over. Every step is recorded in the store before
it is shown, so a gpuops that is closed (or killed) and reopened finds the deployment where it was.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

from .. import units
from ..domain import Evidence, Finding, FindingEvent, Fix, Plan, ProgressEvent, StateEvent, flag_value, split_flags
from ..states import State
from ..hosts.files import new_api_key, read_env_value, remote_home
from ..hosts.host import Host, HostError, host_python, script_source
from ..hosts.programs import port_free as port_free_program
from ..hosts.model_copies import copy_complete
from .. import engines
from ..planning.hostfacts import engine_version, free_space, help_flags
from ..planning.plan import deprecated_warnings
from ..telemetry.samples import snapshot
from .download import Download, DownloadError, bytes_on_disk
from .launchers import Launcher, LaunchError, open_launcher
from .store import Lease, Store
from .watch import Bus, log_end


class DeployError(Exception):
    """Deploy refused before anything changed on the host (exit 2), with a one-line reason."""


class Deployer:
    """The steps of one deployment of `plan` on `host`; its events go to the store and the bus."""

    def __init__(self, host: Host, plan: Plan, store: Store, bus: Bus, *, yes: bool = False,
                 ask: Callable[[str], bool] | None = None, stall: dict[str, float] | None = None,
                 hf_token: str | None = None, journal_dir: str | None = None, api_key: str | None = None,
                 secrets: dict[str, str] | None = None):
        self.host = host
        self.plan = plan
        self.name = plan.name
        self.store = store
        self.bus = bus
        self.yes = yes
        self.ask = ask
        self.download_stall_s = (stall or {}).get("download", 120.0)
        self.hf_token = hf_token
        self.journal_dir = journal_dir
        # the key of a deployment of several parts, one for all (the router sends it to its replicas);
        # None: this part's own, kept in its env file from an earlier run, or a new one
        self.api_key = api_key
        # the values of the plan's secrets (its secret_names) carried from where --like read them;
        # one not given is the deployment's own, from its env file (a restart)
        self.secrets = dict(secrets or {})
        self.launcher: Launcher | None = None
        self.run = 0
        # what download() found or did: {"present": the copy was complete already, "bytes", "seconds"}
        self.fetched: dict[str, Any] = {}
        self._beat_at = -1e9

    def record(self, event: Any) -> Any:
        stored = self.store.record(self.name, event, run=self.run or None)
        self.bus.publish(self.name, stored)
        return stored

    # ---------------------------------------------------------------- checks

    async def preflight(self, *, held: bool = False) -> None:
        """Every refusal first (:meth:`checks`), then the question about GPUs in use: an operator is
        never asked to confirm a deploy that would then be refused. `held`: the port and GPUs are held
        by the deployment this one replaces (a swap fetches the new weights while the old server still
        serves): they are checked by :meth:`check_held` once that one is stopped."""
        await self.checks(held=held)
        if not held:
            await self.confirm_gpus()

    async def check_held(self) -> None:
        """What :meth:`preflight` left out with `held`: the ports free, the GPUs free or confirmed."""
        await self.check_ports()
        await self.confirm_gpus()

    async def checks(self, *, held: bool = False) -> None:
        """What refuses the deploy (DeployError), nothing asked: the engine (or its router) installed
        there, the ports free (not with `held`), room for the download."""
        plan, host = self.plan, self.host
        engine = engines.get(plan.engine)
        if plan.replicas:  # a router: the engine's router where it runs, its ports free
            await self.choose_router()
        elif (version := await engine_version(host, plan.engine)) is None:
            raise DeployError(f"{engine.title} is not installed on {host.name} (python {plan.python}): "
                              f"{engine.install_hint()}")
        else:
            await self.check_flags(version)
        if not held:
            await self.check_ports()
        await self.check_secrets()
        if plan.download_dir and not plan.reuse_existing:
            free = (await free_space(host, (plan.download_dir,))).get(plan.download_dir)
            need = int((plan.model.checkpoint_bytes or 0) * 1.1)
            if free is not None and free < need:
                raise DeployError(f"{plan.download_dir} on {host.name} has {units.size(free)} free; "
                                  f"the model needs {units.size(need)}")

    async def choose_router(self) -> None:
        """The router a router's plan runs: the one it names, else the first of the engine's routers
        installed there (the plan then names it: the stored plan says what ran). DeployError when
        none is installed."""
        plan, host = self.plan, self.host
        engine = engines.get(plan.engine)
        choices = [engine.router(plan.router)] if plan.router else list(engine.routers)
        python = host_python(host)
        for router in choices:
            res = await host.run(engine.router_check_argv(python, router), timeout=60)
            if res.ok:
                if plan.router is None:
                    self.plan = plan.replace(router=router.package)
                return
        raise DeployError(f"{' or '.join(r.package for r in choices)} is not installed on {host.name} (python {plan.python}): "
                          f"pip install {choices[0].package} there first")

    async def check_flags(self, version: str) -> None:
        """Every flag of the plan accepted by the engine there: its server's `--help` (cached per version),
        with the hidden flags of its version's data; without that, its version's flags from the wheels,
        when the data knows that version. A plan made for another version, or edited, with a flag this
        version removed or never had is refused (DeployError) before anything changes: the server would
        die on it at start-up, after a download."""
        plan, host = self.plan, self.host
        engine = engines.get(plan.engine)
        sv = engine.versions
        accepted = await help_flags(host, version, plan.engine)
        if accepted:
            flags = accepted | sv.hidden_flags(version)
        elif sv.resolve(version) == version:
            flags = sv.flags_for(version)
        else:
            return  # a version the data does not know, whose --help could not be read: nothing to check against
        refused = sorted({name for name, _ in split_flags(plan.argv) if name not in flags})
        if refused:
            made = (f"; the plan was made for {engine.title} {plan.engine_version}"
                    if plan.engine_version and plan.engine_version != version else "")
            named = ", ".join(sv.removal_note(n, version) for n in refused)
            raise DeployError(f"{engine.title} {version} on {host.name} does not accept "
                              f"{named}{made}: plan it again for this host (--like keeps the rest)")
        # what the host's version still accepts but has deprecated: said in the stored plan's warnings
        # (a plan made for an older version, or offline, did not say it)
        late = [w for w in deprecated_warnings(split_flags(plan.argv), engine, version) if w not in plan.warnings]
        if late:
            self.plan = plan.replace(warnings=[*plan.warnings, *late])

    async def check_ports(self) -> None:
        """The plan's ports (a router's metrics port too) free to bind on the host; DeployError when
        one is not."""
        plan, host = self.plan, self.host
        ports = [plan.port] + ([int(p)] if plan.replicas and (p := flag_value(plan.argv, "--prometheus-port")) else [])
        for port in ports:
            res = await host.run([host_python(host), "-c", script_source(port_free_program), plan.bind_host, str(port)],
                                 timeout=30)
            if not res.ok:
                raise DeployError(f"port {port} is in use on {host.name} ({res.stdout.strip()}): choose another --port")

    async def check_secrets(self) -> None:
        """The secrets carried from a previous deployment (secret_env) and any other placeholder's at
        hand (given, or in the deployment's env file on the host); only gpuops' own API key may be a
        new one. DeployError naming the missing ones."""
        plan, host = self.plan, self.host
        missing = [n for n in plan.secret_names if not self.secrets.get(n)
                   and not (n == "GPUOPS_API_KEY" and (self.api_key or n not in plan.secret_env))]
        if not missing:
            return
        env_path = getattr(await open_launcher(host, plan), "env_path")
        missing = [n for n in missing if not await read_env_value(host, env_path, n)]
        if missing:
            source = plan.like.source if plan.like is not None else "the plan"
            raise DeployError(f"{plan.name} needs the secret{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                              f"(carried from {source}), which gpuops cannot read now ({source} is gone, or not on "
                              f"this machine) and {env_path} on {host.name} does not hold: plan again "
                              "where the previous deployment can be read")

    async def confirm_gpus(self) -> None:
        """The plan's GPUs already run processes: go on only when the operator says so (--yes, or
        `ask`); DeployError otherwise."""
        plan = self.plan
        snap = await snapshot(self.host)
        busy = [(g.index, p) for g in snap.gpus if g.index in plan.gpu_ids for p in g.processes]
        if busy:
            listing = "; ".join(f"GPU{i}: pid {p.pid} {p.user or '?'} {p.command or '?'}" for i, p in busy)
            question = f"the plan's GPUs already run processes: {listing}"
            if not self.yes and not (self.ask and self.ask(question)):
                raise DeployError(question + " (refusing without --yes)")

    def begin_run(self, why: Any = None) -> None:
        """A restart's (or a fix's) new run of the deployment, begun before anything is stopped or
        downloaded: planned, with `why` (a PlanEvent: the plan it starts with and the reason). The
        name's lease is this process's until its server has started; StoreError (NameTaken): another
        gpuops deploys it, nothing changed."""
        self.run = self.store.new_run(self.name, lease=Lease.mine(), state=State.PLANNED, watcher=os.getpid())
        self._beat_at = time.monotonic()
        self.bus.publish(self.name, next(iter(self.store.events(self.name, run=self.run))))
        if why is not None:
            self.bus.publish(self.name, self.store.replace_plan(self.name, self.plan, why))

    def begin(self) -> None:
        """Record the deployment (a new run of its name); StoreError: refused, nothing changed."""
        d = self.store.add_deployment(self.host.name, self.plan, watcher=os.getpid())  # its heartbeat with it
        self.run = d.run
        self._beat_at = time.monotonic()
        self.bus.publish(self.name, next(iter(self.store.events(self.name, run=d.run))))

    def beat(self) -> None:
        """This process is deploying it (another gpuops that opens it relays, it does not watch)."""
        now = time.monotonic()
        if now - self._beat_at >= 2.0:
            self._beat_at = now
            self.store.set_position(self.name, run=self.run or None, watcher=os.getpid())

    # ---------------------------------------------------------------- steps

    async def download(self) -> bool:
        """The weights on the host: a copy that is complete already is used as it is (nothing runs:
        a restart needs no Hub); else they are downloaded, resuming from what is on disk, with
        progress, and the copy is checked once the download ends. False when it failed, stalled or
        left the copy incomplete (recorded: the finding and the state)."""
        plan = self.plan
        into_cache = not plan.download_dir and bool(plan.model_path) and not plan.model_path.startswith("/")
        if plan.reuse_existing or not (plan.download_dir or into_cache):
            return True
        where = {"repo_id": plan.model_path} if into_cache else {"path": plan.model_path}
        if await copy_complete(self.host, **where):
            self.fetched = {"present": True, "bytes": 0, "seconds": 0.0}
            return True
        began = time.monotonic()
        cache_folder = None
        if into_cache:  # a repo id served from the host's HF cache: downloaded there first, with progress
            from ..hosts.model_copies import hf_cache_entry

            cache_folder = (await hf_cache_entry(self.host, plan.model_path))[1]
        self.record(StateEvent(state=State.DOWNLOADING, model=plan.model.id,
                               into=cache_folder or plan.model_path))
        home = await remote_home(self.host)
        dl = Download(self.host, plan.model.id, None if into_cache else plan.model_path, plan.model.checkpoint_bytes,
                      token=self.hf_token, token_file=f"{home}/.local/state/gpuops/deployments/{self.name}/hf.env",
                      stall_after_s=self.download_stall_s, cache_folder=cache_folder)
        done = 0
        try:
            async for p in dl.progress():
                self.beat()
                done = p.done_bytes
                self.record(ProgressEvent(phase="downloading", done=p.done_bytes, total=p.total_bytes,
                                          rate_bps=round(p.rate_bps),
                                          eta_s=None if p.eta_s is None else round(p.eta_s, 1)))
            if await copy_complete(self.host, **where) is False:
                raise DownloadError(f"the download of {plan.model.id} ended, but the copy in {dl.into} is incomplete "
                                    "(a shard its index names is missing or short): deploy again to resume it")
        except DownloadError as exc:
            stalled = exc.message.startswith("download-stalled")
            self.record(FindingEvent.of(await self._download_finding(exc, stalled, dl)))
            self.record(StateEvent(state=State.STALLED if stalled else State.CRASHED, reason=exc.message))
            return False
        self.fetched = {"present": False, "bytes": done, "seconds": round(time.monotonic() - began, 1)}
        return True

    async def _download_finding(self, exc: DownloadError, stalled: bool, dl: Download) -> Finding:
        """What a download that failed or stalled says, with what the host's disk shows: how much is
        there and how much room is left; the fix follows it (room for the rest: deploy again, the
        download resumes from the disk, and look at the network if it stalls again; no room: free
        it first)."""
        if not stalled:
            return Finding("download-failed", "error", exc.message, fix=Fix(exc.hint) if exc.hint else None)
        name, host, into = self.name, self.host.name, dl.into
        done = free = None
        try:
            done = await bytes_on_disk(self.host, into) if (dl.local_dir or dl.cache_folder) else None
            free = (await free_space(self.host, (into,))).get(into)
        except HostError:
            pass  # the host is gone too: the finding says what the download said
        total = self.plan.model.checkpoint_bytes
        evidence = []
        if done is not None:
            evidence.append(Evidence("disk", reading=units.size(done) + (f" of {units.size(total)}" if total else "")
                                     + f" in {into}"))
        if free is not None:
            evidence.append(Evidence("df", reading=f"{units.size(free)} free where {into} is"))
        again = f"`gpuops restart {name}`: the download resumes from the disk"
        left = (total or 0) - (done or 0)
        if free is not None and left > free:
            fix = (f"the disk is full for it: {units.size(left)} are still to come and {units.size(free)} are free "
                   f"where {into} is on {host}: free room there (or plan another download folder), then {again}")
        else:
            fix = (f"{again}" + (f" (from the {units.size(done)} there)" if done else "")
                   + f"; if it stalls again, {host} does not reach the Hub: check its network (a proxy, HF_ENDPOINT) "
                   "and the Hub's status")
        return Finding("download-stalled", "error", exc.message.removeprefix("download-stalled: "), tuple(evidence),
                       Fix(fix), data={"done_bytes": done, "total_bytes": total, "free_bytes": free, "into": into})

    async def launch(self) -> None:
        """Install and start the server. Its run's log begins where the log ends now."""
        plan = self.plan
        self.launcher = await open_launcher(self.host, plan)
        position = await log_end(self.host, self.launcher, self.journal_dir)
        self.store.begin_log(self.name, run=self.run or None, **position)
        secrets_env: dict[str, str] = {}
        env_path = self.launcher.env_path
        for name in plan.secret_names:  # given (carried by --like), else kept from the env file
            value = (self.api_key if name == "GPUOPS_API_KEY" else None) or self.secrets.get(name) \
                or await read_env_value(self.host, env_path, name)
            if not value and name == "GPUOPS_API_KEY":
                value = new_api_key()
            if not value:
                raise LaunchError(f"{plan.name}: the secret {name} is not at hand (its env file {env_path} on "
                                  f"{self.host.name} lost it): plan again like the previous deployment")
            secrets_env[name] = value
        await self.launcher.install(secrets_env)
        await self.launcher.start()
        self.record(StateEvent(state=State.STARTING, launcher=self.launcher.kind))
