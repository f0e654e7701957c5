"""What a serving engine is to gpuops: the class an engine's adapter subclasses.

gpuops plans, deploys, watches, triages and benchmarks a server; what it runs is an engine's. An
adapter answers, for its engine: the command line (the module ``python -m`` runs, and how a plan's
flags follow it), whether the engine is installed on a host (and which version), its phase grammar
(a tracker fed the server's log lines) and its finding rules (a scanner fed the same lines), its
benchmark's module and the names of its Prometheus metrics. The rest of gpuops asks the adapter
(``engines.get(plan.engine)``), never the engine's own names.

This module imports nothing of gpuops: the domain (``Plan``) asks an engine for its module.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

if TYPE_CHECKING:
    from .records import Change, LogLine

__all__ = ["Engine", "Router", "Tracker", "Scanner", "VersionData", "SimHostPart", "NoSimHost"]


class StartupReserve(NamedTuple):
    """What an engine keeps outside its static memory at start-up (activations, CUDA graphs), per GPU."""

    bytes: int
    why: str  # its terms, one phrase
    warning: str | None  # what the plan says when its static share leaves less; None: it leaves enough


class Router(NamedTuple):
    """A router an engine's replicas can serve behind: what pip installs (and a plan records, its
    ``router``) and what ``python -m`` runs. gpuops passes every router of an engine the same flags."""

    package: str
    module: str


class Tracker(Protocol):
    """An engine's phase grammar over one run's log (fed line by line, in order)."""

    phase: str | None  # gpuops' phase (core/states.py) it is in; None before the first line
    line_no: int  # lines fed
    crash: Any  # a records.Crash once the log says the server died, else None

    @property
    def outcome(self) -> str: ...  # "ready", "crashed" or "incomplete"

    def feed(self, raw: str | LogLine) -> list[Change]: ...

    def idle(self) -> list[Change]: ...  # the log has been quiet a few seconds

    def finish(self) -> list[Change]: ...  # the log ended

    def resume(self, phase: str) -> None: ...  # carry on a run another tracker read up to `phase`


class Scanner(Protocol):
    """An engine's finding rules: fed the same lines as the tracker, asked for findings at the end."""

    def feed(self, line: str | LogLine, tracker: Any = None) -> None: ...

    def findings(self, tracker: Any, plan: Any = None) -> list[Any]: ...


class VersionData:
    """What an engine's releases take: the planner's version data. These defaults know no release
    (a version is taken as given, no flag list: the planner checks no flag against one); an engine
    with data (from its wheels, say) overrides them."""

    def key(self, version: str) -> tuple[int, ...]:
        """`version` as a key that sorts releases in order."""
        return tuple(int(n) for n in re.findall(r"\d+", version))

    def newest(self) -> str:
        """The newest release gpuops has data for (what a plan is for when the host has none)."""
        return "0"

    def resolve(self, version: str) -> str:
        """The release whose data stands for `version`."""
        return version

    def flags_for(self, version: str) -> frozenset[str]:
        """The server's flags in `version`."""
        return frozenset()

    def hidden_flags(self, version: str) -> frozenset[str]:
        """The flags `version` accepts but leaves out of its --help."""
        return frozenset()

    def parse_help_flags(self, text: str) -> frozenset[str]:
        """The option strings of the server's --help text."""
        return frozenset(re.findall(r"(?<![\w-])--[A-Za-z][\w.-]*", text))

    def removed_flag(self, flag: str, version: str) -> tuple[str, str | None] | None:
        """A flag `version` no longer has that an older one had: (the last version that had it, what
        its deprecation notice named instead, or None); None when `version` has it or the data never
        knew it (the default: no data)."""
        return None

    def removal_note(self, flag: str, version: str) -> str:
        """`flag` as a refusal names it: with when it went and what replaced it, where known
        ("--x (gone after 0.5.19, whose notice said: use --y)")."""
        gone = self.removed_flag(flag, version)
        if gone is None:
            return flag
        last, instead = gone
        return f"{flag} (gone after {last}" + (f", whose notice said: use {instead})" if instead else ")")

    def deprecated_flags(self, version: str) -> Mapping[str, str | None]:
        """{a flag `version` deprecates: what its notice says to use instead (``--x`` or ``--x=value``;
        None: nothing named)}: ``--like`` writes a deprecated flag under its replacement's name."""
        return {}

    def match_flag(self, flag: str, flags: frozenset[str]) -> str | None:
        """The option string the server takes `flag` for among `flags` (None: none): `flag` itself by
        default; an engine whose parser takes abbreviations says so."""
        return flag if flag in flags else None


class Engine(ABC):
    """An engine's adapter. Subclass it, fill in the class attributes and the abstract methods, and
    register the class (``engines.register``); a plan names its engine (``Plan.engine``)."""

    name: ClassVar[str]  # how plans and the registry name it (its package's name)
    title: ClassVar[str]  # how text names it (as its project spells it)
    # its start-up phases in the order a start passes them, each mapped to gpuops' own (state_of)
    phases: ClassVar[tuple[str, ...]]
    # gpuops' names of the server's live numbers -> the engine's Prometheus metric names
    metrics: ClassVar[Mapping[str, str]] = {}
    # the routers it can serve replicas behind, the one it prefers first (a deploy runs the first the
    # host has, unless the plan names one); () : replicas are not offered
    routers: ClassVar[tuple[Router, ...]] = ()
    # the start of the process title each of the server's rank processes gives itself (None: it gives none;
    # the stall watcher then counts processes only)
    rank_title: ClassVar[str | None] = None

    # -- the command line ----------------------------------------------------------------------

    @abstractmethod
    def server_module(self) -> str:
        """What ``python -m`` runs to serve."""

    def router(self, package: str | None = None) -> Router:
        """The router named by its package (a plan's ``router``), else the one the engine prefers;
        KeyError for one the engine does not know (or when it has none)."""
        for r in self.routers:
            if package is None or r.package == package:
                return r
        raise KeyError(package or f"{self.title} has no router")

    def router_policies(self, package: str) -> tuple[str, ...]:
        """The routing policies router `package` accepts (its --policy), the first its default where
        the engine says it; () where it does not say (the default)."""
        return ()

    def router_title(self, package: str | None = None) -> str:
        """How text names the router: the one named, else each the engine has, preferred first."""
        return package if package is not None else " or ".join(r.package for r in self.routers) or "a router"

    def command_flags(self, argv: Sequence[str]) -> list[str]:
        """The flags of a command line that ran the server (a unit's ExecStart, for --like): what
        follows its module (``python -m MODULE``), else everything from the first ``--`` option."""
        args = list(argv)
        module = self.server_module()
        for i, a in enumerate(args):
            if a == module:
                return args[i + 1:]
            if a.startswith("--"):
                return args[i:]
        return args

    # -- what a host has -----------------------------------------------------------------------

    @abstractmethod
    def version_program(self) -> str:
        """Python source that prints the installed engine's version and exits 0, or exits non-zero
        when it is not installed (standard library only: it runs with the host's python)."""

    def install_hint(self) -> str:
        return "install it there first"

    def router_check_argv(self, python: str, router: Router) -> list[str]:
        """The command that succeeds where `router` is installed (for `python`)."""
        return [python, "-m", router.module, "--help"]

    # -- planning ------------------------------------------------------------------------------

    versions: ClassVar[VersionData] = VersionData()  # its releases' flags (the planner's version data)
    owned_flags: ClassVar[frozenset[str]] = frozenset()  # flags the planner writes itself (no edit may)

    def plan_rules(self) -> Sequence[Any]:
        """The planner's flag rules for this engine (``core.planning.rules.Rule``), fired in order;
        none by default (a plan is then the model, the port and what the operator adds)."""
        return ()

    def official(self, facts: Any, gpu_name: str | None, gpu_memory: int, gpus: int) -> Any | None:
        """The engine's published command for this checkpoint on up to `gpus` GPUs like this one (its
        docs' recipe), or None (the default: the engine publishes none gpuops reads). What the planner
        reads of it: ``tp`` (its tensor parallel size), ``speculative`` (whether it decodes
        speculatively), ``mem_fraction`` (its static memory share, None: the engine's own) and
        ``source`` (where it is written); the engine's rules read the rest."""
        return None

    def mtp_default(self, facts: Any, wishes: Any, official: Any | None) -> bool:
        """Whether speculative decoding is on for a checkpoint with MTP layers when the operator said
        neither --mtp nor --no-mtp. On by default."""
        return True

    def startup_reserve(self, facts: Any, version: str, gpu_memory: int, tp: int,
                        flags: Mapping[str, Sequence[str]]) -> StartupReserve | None:
        """What the engine's `version` keeps outside the plan's static memory on each GPU of
        `gpu_memory` bytes at TP `tp` with the plan's `flags` ({flag: values}), and whether the plan's
        static share leaves it; None (the default): the engine does not say."""
        return None

    def max_running(self, spec: bool) -> int:
        """How many requests the server runs at once by default (`spec`: with speculative decoding):
        the fit keeps state for that many."""
        return 128

    # -- the log -------------------------------------------------------------------------------

    def state_of(self, phase: str) -> str:
        """gpuops' phase (core/states.py) for one of the engine's `phases` (the same name by default)."""
        return phase

    @abstractmethod
    def clean(self, raw: str) -> LogLine:
        """One raw log line as the tracker and the scanner read it."""

    @abstractmethod
    def tracker(self) -> Tracker:
        """A new phase tracker for one run's log."""

    @abstractmethod
    def scanner(self) -> Scanner:
        """A new finding-rules scanner for one run's log."""

    def track_log(self, lines: Iterable[str], observer: Callable[[LogLine, Any], object] | None = None) -> Tracker:
        """A tracker run over a finished log, returned; ``observer(line, tracker)`` sees every
        cleaned line after the tracker did (the scanner reads the same pass)."""
        tr = self.tracker()
        for raw in lines:
            ln = self.clean(raw)
            tr.feed(ln)
            if observer is not None:
                observer(ln, tr)
        tr.finish()
        return tr

    def nccl_log_on(self, scanner: Any, plan: Any) -> bool:
        """Whether NCCL's own INFO log is among the lines `scanner` read (a stall's finding says so)."""
        return False

    # -- benchmarks ----------------------------------------------------------------------------

    def bench_module(self, version: str) -> str | None:
        """The module of the engine's serving benchmark in `version` (None: it has none)."""
        return None

    def eval_module(self) -> str | None:
        """The module of the engine's accuracy evaluation (the quality profile's; None: it has none)."""
        return None

    def __repr__(self) -> str:
        return f"<engine {self.name}>"

    # -- benchmarks: their command lines and what they write (none by default) ------------------

    bench_backend: ClassVar[str | None] = None  # the serving benchmark's --backend (a profile's "backend")

    def bench_argv(self, python: str, module: str, *, url: str, settings: Mapping[str, Any], num_prompts: int,
                   concurrency: int | None, output_file: str, model_path: str | None = None,
                   tokenizer_path: str | None = None, served_name: str | None = None) -> list[str]:
        """One serving-benchmark run (``bench_module``) against `url` with a profile's `settings`
        (`concurrency` None: unlimited), its records written to `output_file` on the host."""
        raise NoBenchmark(f"{self.title} has no serving benchmark gpuops knows")

    def bench_record(self, doc: object) -> bool:
        """Whether one JSON document of the benchmark's output file is one of its records."""
        return False

    def eval_argv(self, python: str, *, url: str, settings: Mapping[str, Any],
                  served_name: str | None = None) -> list[str]:
        """The accuracy evaluation (``eval_module``) with a quality profile's `settings`."""
        raise NoBenchmark(f"{self.title} has no accuracy evaluation gpuops knows")

    def read_eval_output(self, lines: Iterable[str]) -> dict[str, float]:
        """The evaluation's figures from what it printed: ``score`` (absent: it printed none), and
        ``latency_s``, ``output_throughput`` where it printed them."""
        return {}

    # where the server says how it runs (a JSON object: its parsers, its speculative decoding), the
    # first path that answers; the functional checks read it (none: the engine's server says nothing)
    server_info_paths: ClassVar[tuple[str, ...]] = ()
    # the path whose answer says the server still serves (a watch asks it once a poll after ready)
    health_path: ClassVar[str] = "/health"

    # -- planning: how the plan and its messages name the engine's things ----------------------

    # the planning option that names the version to plan for (a plan says it as its version's source)
    version_option: ClassVar[str] = "--engine-version"

    # -- --like: what a previous deployment's flags and env still mean --------------------------

    flag_aliases: ClassVar[Mapping[str, str]] = {}  # a flag's other spellings -> the name a plan writes

    def serves(self, architecture: str, version: str) -> bool | None:
        """Whether `version` of the engine serves `architecture` (a config's architectures[0]) with a model
        of its own; None when the engine's data does not say."""
        return None

    def model_warnings(self, facts: Any, version: str) -> list[str]:
        """What a plan of the model (a planning.ModelFacts) on `version` should warn of that only the
        engine knows (the checkpoint's own code it would run, a config it cannot read)."""
        return []

    def tp_refusal(self, facts: Any, tp: int) -> str | None:
        """Why the engine cannot shard the model (a planning.ModelFacts) over `tp` GPUs, None when it
        can. The default asks what every tensor-parallel engine needs: the attention heads split evenly."""
        heads = facts.num_attention_heads
        if heads and heads % tp:
            return f"TP {tp} does not divide the model's {heads} attention heads"
        return None

    def like_drop_reason(self, name: str, values: tuple[str, ...], ctx: Any) -> str | None:
        """Why the engine drops a previous deployment's flag `name` (with `values`) from the plan
        `ctx` (a ``core.planning.rules.Ctx``) makes: a quantization's flag on another checkpoint, a
        feature this plan has off, a flag renamed in ``ctx.version``; None: nothing it knows of (the
        planner still drops a flag the version does not have)."""
        return None

    def like_env_reason(self, key: str, value: str, ctx: Any) -> str | None:
        """Why a previous deployment's environment variable `key` no longer applies to the plan `ctx`
        makes (None: it is kept)."""
        return None

    # -- the simulated host (gpuops.sim): what stands in for the engine there ------------------

    def simhost(self) -> SimHostPart:
        """What gpuops' simulated host stands in for of this engine (its package, its server module,
        its --help): :class:`SimHostPart`. :class:`NoSimHost` (one line): this engine has none."""
        raise NoSimHost(f"{self.title} has no simulated host: gpuops sim stands in for another engine")


class NoBenchmark(ValueError):
    """The engine has no benchmark (or evaluation) gpuops knows: one line."""


class NoSimHost(ValueError):
    """The engine has no simulated host (gpuops sim): one line."""


class SimHostPart(ABC):
    """What gpuops' simulated host (``gpuops.sim.host``) presents of an engine: a stand-in package
    (its version, its metadata, an import that fails on a host without it), the server module its
    python wrapper hands to the simulator (and ``--help`` answered from the engine's version data),
    the modules it runs for real from the engine's virtualenv, and the small server's script. The
    simulator renders the host's files from these; it names none of them itself."""

    title: ClassVar[str]  # how the host's messages name the engine
    package: ClassVar[str]  # the stand-in package's import name (DIR/lib/PACKAGE/)
    server_module: ClassVar[str]  # `python -m` of it starts the server: the simulator answers
    real_modules: ClassVar[tuple[str, ...]]  # shell patterns of modules run from the engine's virtualenv
    venv_option: ClassVar[str]  # `gpuops sim setup`'s option that gives that virtualenv
    absent: ClassVar[tuple[str, ...]]  # version values that mean "this host has no such engine"

    @abstractmethod
    def check_version(self, version: str | None) -> str | None:
        """The version the host presents (None given: the newest with data; None returned: the host has
        none of the engine, for a value in ``absent``); ValueError (one line) for a malformed one."""

    @abstractmethod
    def package_files(self, version: str | None) -> Mapping[str, str]:
        """The stand-in package's files (paths under the host's lib/, text), for `version` (None: the
        files of a host without the engine, whose import fails)."""

    @abstractmethod
    def help_text(self, version: str) -> str:
        """What ``python -m SERVER_MODULE --help`` prints for `version`."""

    @abstractmethod
    def server_files(self, version: str) -> Mapping[str, str | bytes]:
        """The files the host's server reads next to it (names, contents) for `version`: its flags
        and the like (the tests' scenario engine reads them)."""

    @abstractmethod
    def demo_script(self) -> Mapping[str, Any]:
        """The product's small server's script (start-up lines, crash, metrics: JSON-ready data)."""
