"""What gpuops' simulated host (``gpuops.sim.host``) presents of SGLang: a stand-in ``sglang`` package
(``__version__``, ``sglang/version.py`` and its dist-info, so ``import sglang`` and
``importlib.metadata.version("sglang")`` name the host's version; or an import that fails), the server
module ``sglang.launch_server`` whose ``--help`` lists exactly that version's options in argparse's
layout (``versions.format_help``) and whose other runs start the simulator, the modules that run for
real from an SGLang virtualenv (``sglang.bench_serving``, ``sglang.benchmark.serving``,
``sglang.test.run_eval``, the routers ``smg.*`` and ``sglang_router.*``), the version's options for the simulator's
argparse (``launch_server.json``), ServerArgs' fields (``server_args.json``) and the demo's script."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..base import Engine, SimHostPart
from . import demo, versions

__all__ = ["SGLangSimHost"]

SERVER_ARGS_FILE = Path(__file__).resolve().parent / "data" / "server_args.json"  # ServerArgs' fields
_VERSION = re.compile(r"^\d+(\.\d+)*[0-9A-Za-z.+_-]*$")

_INIT = '''"""gpuops' simulated host: a stand-in for SGLang {version} (its version, nothing else)."""

__version__ = "{version}"
'''

_VERSION_PY = '''__version__ = "{version}"
'''

_METADATA = """Metadata-Version: 2.1
Name: sglang
Version: {version}
Summary: gpuops simulated host: a stand-in for SGLang {version}
"""

_ABSENT = '''"""gpuops' simulated host, sglang_version="none": this python has no sglang."""
raise ModuleNotFoundError("No module named 'sglang'", name="sglang")
'''


class SGLangSimHost(SimHostPart):
    title = "SGLang"
    package = "sglang"
    server_module = "sglang.launch_server"
    # SGLang's benchmark and eval modules (bench_serving, benchmark.serving, test.run_eval, ...) and its
    # routers, smg and sglang-router (the real Rust routers, in front of simulated servers)
    real_modules = ("sglang.*", "smg.*", "sglang_router.*")
    venv_option = "--sglang-venv"
    absent = ("none", "absent")

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def check_version(self, version: str | None) -> str | None:
        if version is None:
            return versions.newest_version()
        if not isinstance(version, str):
            raise ValueError("sglang_version must be a version string or 'none', not %r" % (version,))
        v = version.strip()
        if v.lower() in self.absent:
            return None
        if v[:1] in ("v", "V"):
            v = v[1:]
        try:
            versions.version_key(v)
        except ValueError:
            v = ""
        if not _VERSION.match(v) or len(v) > 40:
            raise ValueError("sglang_version must look like 0.5.23 (or be 'none' for a host without SGLang), "
                             "not %r" % (version,))
        return v

    def package_files(self, version: str | None) -> Mapping[str, str]:
        if version is None:
            return {"sglang/__init__.py": _ABSENT}
        info = "sglang-%s.dist-info" % version
        return {"sglang/__init__.py": _INIT.format(version=version),
                "sglang/version.py": _VERSION_PY.format(version=version),
                info + "/METADATA": _METADATA.format(version=version),
                info + "/INSTALLER": "gpuops-simhost\n"}

    def help_text(self, version: str) -> str:
        return versions.format_help(version)

    def server_files(self, version: str) -> Mapping[str, str | bytes]:
        return {"launch_server.json": json.dumps(launch_spec(version), indent=1) + "\n",
                "server_args.json": SERVER_ARGS_FILE.read_bytes()}

    def demo_script(self) -> Mapping[str, Any]:
        return demo.demo_script(self.engine)


def launch_spec(version: str) -> dict[str, Any]:
    """What the simulator's argparse needs: VERSION's option strings (the same parser
    ``format_help`` describes), nargs, static choices, and the parser names."""
    resolved = versions.resolve_version(version)
    args = []
    for key, spec in sorted(versions._expanded()[resolved].items()):
        arg = {"opts": list(spec.get("opts", [key]))}
        for field in ("nargs", "choices", "hidden", "required"):
            if spec.get(field) is not None:
                arg[field] = spec[field]
        args.append(arg)
    return {
        "version": version,
        "resolved": resolved,
        "prog": versions.help_prog(version),
        "args": args,
        "tool_call_parsers": sorted(versions.tool_call_parsers(version)),
        "reasoning_parsers": sorted(versions.reasoning_parsers(version)),
        "spec_v2_default": versions.spec_v2_default(version),
    }
