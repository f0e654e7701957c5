"""SGLang's adapter: what gpuops asks of SGLang, answered by this package's modules (the phase
grammar ``phases.py``, the finding rules ``finding_rules.py``, the planner's flag rules
``flag_rules.py``, the flags and benchmark modules of each version ``versions.py`` + ``data/``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..base import Engine, Router, SimHostPart, StartupReserve, VersionData
from . import bench, flag_rules, memory, models, recipes, remote_code, routers, sharding, versions
from .finding_rules import LogScanner, nccl_log_on
from .phases import PHASES, PhaseTracker, clean, track_log
from ..records import LogLine
from ...planning.rules import Rule

__all__ = ["SGLang", "EVAL_MODULE"]

EVAL_MODULE = bench.EVAL_MODULE  # the quality profile's evaluation (gsm8k)


class SGLangVersions(VersionData):
    """SGLang's releases, read from its wheels (``versions.py`` + ``data/``)."""

    def key(self, version: str) -> tuple[int, ...]:
        return versions.version_key(version)

    def newest(self) -> str:
        return versions.newest_version()

    def resolve(self, version: str) -> str:
        return versions.resolve_version(version)

    def flags_for(self, version: str) -> frozenset[str]:
        return versions.flags_for(version)

    def hidden_flags(self, version: str) -> frozenset[str]:
        return versions.hidden_flags(version)

    def parse_help_flags(self, text: str) -> frozenset[str]:
        return versions.parse_help_flags(text)

    def deprecated_flags(self, version: str) -> Mapping[str, str | None]:
        return versions.deprecated_flags(version)

    def removed_flag(self, flag: str, version: str) -> tuple[str, str | None] | None:
        return versions.removed_flag(flag, version)

    def match_flag(self, flag: str, flags: frozenset[str]) -> str | None:
        return versions.match_flag(flag, flags)  # argparse's: a unique prefix of a long option too


class SGLang(Engine):
    name = "sglang"
    title = "SGLang"
    phases = PHASES
    metrics = {
        "running_reqs": "sglang:num_running_reqs",
        "queued_reqs": "sglang:num_queue_reqs",
        "gen_throughput": "sglang:gen_throughput",
        "token_usage": "sglang:token_usage",
        "full_token_usage": "sglang:full_token_usage",  # what older versions export instead
        "accept_length": "sglang:spec_accept_length",
    }
    server = "sglang.launch_server"
    # SGLang's gateway (PyPI smg, its successor), else the last sglang-router (0.3.2) where a host has only it;
    # both take the flags gpuops writes, with the same defaults (read in smg 1.13.0's and 0.3.2's --help)
    routers = (Router("smg", "smg.launch_router"), Router("sglang-router", "sglang_router.launch_router"))
    rank_title = "sglang::scheduler"  # its ranks' process titles: sglang::scheduler_TP0, …_DP1_TP1
    bench_backend = bench.BACKEND  # bench_serving's --backend
    versions = SGLangVersions()
    owned_flags = flag_rules.OWNED_FLAGS

    def plan_rules(self) -> Sequence[Rule]:
        return flag_rules.RULES

    def official(self, facts: Any, gpu_name: str | None, gpu_memory: int, gpus: int) -> Any | None:
        return recipes.official(facts.id, gpu_name, gpu_memory, gpus)

    def mtp_default(self, facts: Any, wishes: Any, official: Any | None) -> bool:
        """As a previous deployment (--like) ran it when it decoded speculatively; else as SGLang's
        published command for these GPUs has it (recipes); else on."""
        like = wishes.like
        if like is not None and any(a.split("=", 1)[0] in flag_rules.SPEC_FLAGS for a in like.argv):
            return True
        if official is not None and facts.mtp_layers > 0:
            return bool(official.speculative)
        return True

    def startup_reserve(self, facts: Any, version: str, gpu_memory: int, tp: int,
                        flags: Mapping[str, Sequence[str]]) -> StartupReserve | None:
        r = memory.reserve(version, gpu_memory, tp, flags, mla=facts.mla is not None,
                           vision=memory.vision_of(facts.vision_tower))
        fraction = flags.get("--mem-fraction-static")
        try:
            asked = float(fraction[0]) if fraction else None
        except ValueError:
            asked = None
        return StartupReserve(r.bytes, r.why(), memory.warning(r, asked) if asked is not None else None)

    def max_running(self, spec: bool) -> int:
        return flag_rules.SPEC_MAX_RUNNING if spec else flag_rules.DEFAULT_MAX_RUNNING

    def server_module(self) -> str:
        return self.server

    def router_policies(self, package: str) -> tuple[str, ...]:
        found = routers.policies(package)
        default = routers.default_policy(package)
        return tuple(sorted(found, key=lambda p: p != default))  # (its default first, then in the wheel's order)

    def command_flags(self, argv: Sequence[str]) -> list[str]:
        """What follows `python -m sglang.launch_server`, `sglang serve` or a launch_server.py."""
        args = list(argv)
        for i, a in enumerate(args):
            if a in (self.server, "serve") or a.endswith("launch_server.py"):
                return args[i + 1:]
            if a.startswith("--"):
                return args[i:]
        return args

    def version_program(self) -> str:
        """programs/version.py as sent (package metadata first: no import of the server stack)."""
        from ...hosts.host import script_source
        from .programs import version

        return script_source(version)

    def clean(self, raw: str) -> LogLine:
        return clean(raw)

    def tracker(self) -> PhaseTracker:
        return PhaseTracker()

    def scanner(self) -> LogScanner:
        return LogScanner()

    def track_log(self, lines: Iterable[str],
                  observer: Callable[[LogLine, Any], object] | None = None) -> PhaseTracker:
        return track_log(lines, observer)  # (a journal across restarts: the last start's tracker)

    def eval_module(self) -> str | None:
        return EVAL_MODULE

    def nccl_log_on(self, scanner: Any, plan: Any) -> bool:
        return isinstance(scanner, LogScanner) and nccl_log_on(scanner, plan)

    def bench_module(self, version: str) -> str | None:
        return versions.bench_module(version)

    def bench_argv(self, python: str, module: str, *, url: str, settings: Mapping[str, Any], num_prompts: int,
                   concurrency: int | None, output_file: str, model_path: str | None = None,
                   tokenizer_path: str | None = None, served_name: str | None = None) -> list[str]:
        return bench.serving_argv(python, module, url=url, settings=settings, num_prompts=num_prompts,
                                  concurrency=concurrency, output_file=output_file, model_path=model_path,
                                  tokenizer_path=tokenizer_path, served_name=served_name)

    def bench_record(self, doc: object) -> bool:
        return bench.is_record(doc)

    def eval_argv(self, python: str, *, url: str, settings: Mapping[str, Any],
                  served_name: str | None = None) -> list[str]:
        return bench.eval_argv(python, url=url, settings=settings, served_name=served_name)

    def read_eval_output(self, lines: Iterable[str]) -> dict[str, float]:
        return bench.read_eval_output(lines)

    server_info_paths = ("/server_info", "/get_server_info")  # (only the old name on older versions)

    version_option = "--sglang-version"  # gpuops plan/deploy's option

    flag_aliases = flag_rules.ALIASES

    def serves(self, architecture: str, version: str) -> bool | None:
        return models.served(architecture, version) is not None

    def model_warnings(self, facts: Any, version: str) -> list[str]:
        rc = remote_code.remote_code(facts, version)
        out = [rc.unreadable] if rc.unreadable else []
        if rc.needed:
            out.append(f"--trust-remote-code: the server runs the checkpoint's own Python ({', '.join(rc.files)}) on "
                       "the host with its rights; read that code, or pin the model's revision, before deploying")
        for which in (0, 1):
            choice = flag_rules.parser_choice(facts, version, which)
            if choice.warning:
                out.append(f"{choice.warning}: " + (f"--{('reasoning', 'tool-call')[which]}-parser {choice.name} "
                                                    f"instead ({choice.why})" if choice.name else f"none ({choice.why})"))
        return out

    def tp_refusal(self, facts: Any, tp: int) -> str | None:
        return sharding.tp_refusal(facts, tp)

    def like_drop_reason(self, name: str, values: tuple[str, ...], ctx: Any) -> str | None:
        return flag_rules.like_drop_reason(name, values, ctx)

    def like_env_reason(self, key: str, value: str, ctx: Any) -> str | None:
        return flag_rules.like_env_reason(key, ctx)

    def simhost(self) -> SimHostPart:
        from .simulated import SGLangSimHost  # (only gpuops sim asks: the demo's script stays unread otherwise)

        return SGLangSimHost(self)
