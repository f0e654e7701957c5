"""What one run of a deployment looks like, from its events.

A :class:`RunView` is rebuilt from the stored events of a run and kept up to date by the live ones
(the watch's, or those of the use cases: stopped, a fix applied). The deployment screen draws it;
``gpuops status`` reports it. An event of a later run starts the view over (a restart, a fix, a
re-deploy under the same name never shows the previous run's phases); one of an earlier run is
ignored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Iterable

from ..states import PHASES, State
from ..engines.records import DRAFT_SHARDS
from ..diagnose.triage import ranked
from ..domain import (
    ChecksEvent,
    Event,
    Finding,
    FindingEvent,
    HostCheck,
    NumbersEvent,
    PhaseEvent,
    PlanEvent,
    ProgressEvent,
    StateEvent,
)

TERMINAL = (State.CRASHED, State.STOPPED)

# A router's numbers (never stored: published as its watch reads them): the requests it has at a
# replica now, from its /workers "load", under this prefix and the replica's name
IN_FLIGHT = "in_flight:"


def parse_ts(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


def parse_log_ts(text: str | None) -> datetime | None:
    """The engine's own timestamp on a line (``2026-07-14 07:49:04`` or with ``.123``/``,123``): the
    server's clock and zone, good for durations between its lines."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace(",", ".").strip())
    except ValueError:
        return None


@dataclass
class RunView:
    name: str
    run: int = 0
    state: str = State.PLANNED
    state_event: StateEvent | None = None  # the event that set the state
    phases: dict[str, str] = field(default_factory=dict)  # phase -> when it began (RFC 3339)
    phase_lines: dict[str, str] = field(default_factory=dict)
    phase_log_ts: dict[str, datetime] = field(default_factory=dict)  # the server's own time of each phase line
    progress: dict[str, ProgressEvent] = field(default_factory=dict)
    draft_shards: ProgressEvent | None = None  # the draft model's shards (read in the weights phase too)
    numbers: dict[str, float] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    checks: list[HostCheck] | None = None
    stall: StateEvent | None = None  # the stalled state in force
    ready: StateEvent | None = None
    crash: StateEvent | None = None
    plan_change: PlanEvent | None = None  # the fix this run started with
    replicas_lost: set[str] = field(default_factory=set)  # a router's: the replicas it counts unhealthy now
    circuits_open: set[str] = field(default_factory=set)  # a router's: the replicas its circuit breaker cut off now
    in_flight: dict[str, float] = field(default_factory=dict)  # a router's: the requests it has at each replica now
    last_progress: str | None = None  # when the run last moved (a phase, progress or state event)
    events: int = 0

    @classmethod
    def of(cls, name: str, events: Iterable[Event]) -> "RunView":
        view = cls(name)
        for event in events:
            view.apply(event)
        return view

    @property
    def phase(self) -> str | None:
        """The furthest phase the run reached."""
        reached = [p for p in PHASES if p in self.phases]
        return reached[-1] if reached else None

    @property
    def outcome(self) -> str | None:
        """ready, crashed, stalled, stopped, or None while it is on its way."""
        if self.state in (State.READY, State.CRASHED, State.STALLED, State.STOPPED):
            return self.state
        return None

    def apply(self, event: Event) -> bool:
        """Take one event; False when it belongs to an earlier run (ignored)."""
        if event.run and event.run < self.run:
            return False
        if event.run and event.run > self.run:
            self._reset(event.run)
        self.events += 1
        if isinstance(event, StateEvent):
            self._state(event)
        elif isinstance(event, PhaseEvent):
            if event.phase not in self.phases:
                self.phases[event.phase] = event.ts
                if event.line:
                    self.phase_lines[event.phase] = event.line
            logged = parse_log_ts(event.log_ts)
            if logged is not None:
                self.phase_log_ts.setdefault(event.phase, logged)
            self._progressed(event.ts)
        elif isinstance(event, ProgressEvent):
            if event.what == DRAFT_SHARDS:  # not the model's own count (the weights phase keeps that)
                self.draft_shards = event
            else:
                self.progress[event.phase] = event
            if event.phase != State.DOWNLOADING:
                self._progressed(event.ts)
        elif isinstance(event, NumbersEvent):
            for key, value in event.values.items():
                if key.startswith(IN_FLIGHT):
                    self.in_flight[key[len(IN_FLIGHT):]] = value
                else:
                    self.numbers[key] = value
        elif isinstance(event, FindingEvent):
            finding = event.finding()
            # the same finding again (a second triage of the same stall) replaces the first
            self.findings = ranked([f for f in self.findings if f.code != finding.code] + [finding])
            self._replica_finding(finding)
        elif isinstance(event, ChecksEvent):
            self.checks = list(event.checks)
        elif isinstance(event, PlanEvent):
            self.plan_change = event
        return True

    # a router's findings about one replica: (the code that puts it in a set, the one that takes it
    # out, the set's attribute); once the set is empty, the finding that put the last one in goes too
    _REPLICA_SETS = (("replica-lost", "replica-back", "replicas_lost"),
                     ("replica-circuit-open", "replica-circuit-closed", "circuits_open"))

    def _replica_finding(self, finding: Any) -> None:
        replica = finding.data.get("replica")
        for into, out_of, attr in self._REPLICA_SETS:
            if finding.code in (into, out_of) and isinstance(replica, str):
                which: set[str] = getattr(self, attr)
                (which.add if finding.code == into else which.discard)(replica)
                if not which:  # none left to speak of
                    self.findings = [f for f in self.findings if f.code != into]

    def _reset(self, run: int) -> None:
        fresh = RunView(self.name, run)
        self.__dict__.update(fresh.__dict__)

    def _state(self, event: StateEvent) -> None:
        if event.state != State.STALLED:
            self.last_progress = event.ts
        self.state = event.state
        self.state_event = event
        if event.state in PHASES and event.state not in self.phases:
            self.phases[event.state] = event.ts
            if event.line:
                self.phase_lines[event.state] = event.line
        if event.state == State.STALLED:
            self.stall = event
        elif event.state != State.STOPPED:
            self.stall = None
        if event.state == State.READY:
            self.ready = event
            self.phases.setdefault(State.READY, event.ts)
        if event.state == State.CRASHED:
            self.crash = event

    def stall_summary(self, now: datetime | None = None) -> str:
        """The stall in force as its banner says it, its silence counted up to `now` (the stored
        summary's was the silence when the stall was seen), "" without one."""
        from ..diagnose.stall import format_duration

        stall = self.stall
        if stall is None:
            return ""
        summary = stall.summary or stall.phase or "no progress"
        head, sep, rest = summary.partition(", ")
        if stall.phase and head.startswith(f"{stall.phase} silent ") and self.last_progress is not None:
            head = f"{stall.phase} silent {format_duration(self.silent_s(now))}"
        return head + sep + rest

    def silent_s(self, now: datetime | None = None) -> float:
        """Seconds since the run last moved (0 when nothing is known)."""
        if self.last_progress is None:
            return 0.0
        now = now or datetime.now(timezone.utc)
        return max(0.0, (now - parse_ts(self.last_progress)).total_seconds())

    def _progressed(self, ts: str) -> None:
        """Progress after a stall: the stall and what its triage said are over."""
        self.last_progress = ts
        if self.stall is not None:
            self.stall = None
            self.findings = [f for f in self.findings if f.severity != "error" or self.crash is not None]
            self.checks = None

    # -------------------------------------------------------------- times

    def phase_times(self, now: datetime) -> list[tuple[str, float | None]]:
        """Each phase with how long it took: from its line to the next phase's, by the server's own
        timestamps on those lines when both have one (so a phase read late, after a reattach, still
        shows its real time), else by when gpuops saw them; the current phase up to `now` (or to the
        crash or stop). None for a phase not reached."""
        out: list[tuple[str, float | None]] = []
        starts = {p: parse_ts(ts) for p, ts in self.phases.items()}
        end_of_run = None
        if self.state in (State.CRASHED, State.STOPPED) and self.state_event is not None:
            end_of_run = parse_ts(self.state_event.ts)
        for i, phase in enumerate(PHASES):
            begun = starts.get(phase)
            if begun is None:
                out.append((phase, None))
                continue
            nxt = next((p for p in PHASES[i + 1:] if p in starts), None)
            if nxt is not None and phase in self.phase_log_ts and nxt in self.phase_log_ts:
                took = (self.phase_log_ts[nxt] - self.phase_log_ts[phase]).total_seconds()
            else:
                took = ((starts[nxt] if nxt else end_of_run or now) - begun).total_seconds()
            out.append((phase, max(0.0, took)))
        return out
