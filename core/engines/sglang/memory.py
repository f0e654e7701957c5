"""What SGLang keeps outside ``--mem-fraction-static`` at start-up: activations, CUDA graphs and the
rest, as the version's own heuristic sizes them when it picks its default fraction.

SGLang defines ``--mem-fraction-static`` as (weights + KV cache) / GPU memory; what is left is where
the first long prefill's activations and CUDA-graph capture must fit. When the flag is not given,
SGLang computes it from an estimate of that remainder (``reserved_mem``, MiB). A plan that passes a
fraction leaving less than the version's own estimate starts a server whose graph capture, or first
long prompt, may run out of memory: the planner warns before anything starts (``reserve``).

The estimate below is the version's code, read from its wheel (paths relative to ``sglang/``):

- 0.5.23 ``srt/arg_groups/memory_hook.py`` ``handle_gpu_memory_settings`` (GPU-memory bands,
  ``reserved_mem``), ``reserve_for_graph_mb``, ``reserve_for_deepep_a2a_mb``,
  ``adjust_mem_fraction_for_vlm``; the decode graphs' largest batch capped at
  ``--max-running-requests`` when it is the default; prefill CUDA graphs (``breakable``) on by
  default on CUDA (``srt/model_executor/cuda_graph_config.py`` ``default_prefill_backend``).
- 0.5.10 ``srt/server_args.py`` ``_handle_gpu_memory_settings``: the same terms with the older
  bands, piecewise CUDA graphs (``len(piecewise_cuda_graph_tokens) * 8``, MLA 1.5 GiB) unless
  ``_handle_piecewise_cuda_graph`` turned them off, and a draft's share (+4 GiB EAGLE/NEXTN, +6 GiB
  STANDALONE) after the 10 GiB floor.

``REGIMES`` lists which versions compute it which way (``tests/test_sglang_memory.py`` checks 0.5.23
and 0.5.10 against the genuine SGLang resolving its own default, the GPU stood in for). Not
counted: LoRA, HiCache, PD-disaggregated roles, pipeline parallelism's own rules, the versions'
allow-lists of multimodal architectures for prefill graphs (before 0.5.17 a vision tower turns them
off; from 0.5.17 it is taken to be on the list, as Qwen3.5's is on 0.5.23's), post-capture KV sizing
(an environment switch, off by default).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from . import versions

MIB = 1 << 20


@dataclass(frozen=True)
class Regime:
    """How a range of versions sizes its reserve (the fields name what differs between them)."""

    since: str  # the first version computing it this way
    source: str  # where, in that version's wheel
    # (chunked-prefill tokens, decode-graph max batch at TP<4, at TP>=4) on GPUs under 35 GiB; the other
    # bands (<20 GiB: 2048/8; <60: 4096/32/160; <160: 8192/256/512; else 16384/512) never changed
    band_35: tuple[int, int, int]
    prefill_graphs: bool  # prefill (piecewise, then breakable) CUDA graphs captured by default
    # what turns them off before the memory step: "spec" (speculative decoding), "dp" (DP attention),
    # "a2a" (an MoE all-to-all backend), "mla" (MLA attention), "multimodal" (a vision tower)
    prefill_off_for: frozenset[str]
    no_graphs_counts: bool  # --disable-cuda-graph drops the graph terms (older versions reserve them anyway)
    spec_reserve_mib: Mapping[str, int]  # speculative algorithm -> what its draft adds after the floor ("*": others)
    cap_graph_bs_at_running: bool  # the default decode-graph batch capped at --max-running-requests
    deepep_mib: int  # DeepEP all-to-all buffers captured in the decode graph (after the floor)


_G = 1024
_OLD_35 = (2048, 24, 80)
_SPEC_OLD = {"STANDALONE": 6 * _G, "NGRAM": 0, "*": 4 * _G}
# Each regime as its first version's wheel has it (source: file:lines there; the heuristic, then what
# turns prefill graphs off before it runs); 0.5.10 and 0.5.23 are checked against the genuine
# resolution by tests/test_sglang_memory.py, the others read.
REGIMES: tuple[Regime, ...] = (
    Regime("0.5.9", "srt/server_args.py:1020-1069 (0.5.9)", _OLD_35, prefill_graphs=False,
           prefill_off_for=frozenset(), no_graphs_counts=False,
           spec_reserve_mib={"STANDALONE": 6 * _G, "NGRAM": 0, "*": 2 * _G}, cap_graph_bs_at_running=False,
           deepep_mib=0),
    Regime("0.5.10", "srt/server_args.py:1282-1334, :1078-1139 (0.5.10)", _OLD_35, prefill_graphs=True,
           prefill_off_for=frozenset({"spec", "dp", "a2a", "multimodal"}), no_graphs_counts=False,
           spec_reserve_mib=_SPEC_OLD, cap_graph_bs_at_running=False, deepep_mib=0),
    Regime("0.5.11", "srt/server_args.py:1435-1487, :1194-1261 (0.5.11)", _OLD_35, prefill_graphs=True,
           prefill_off_for=frozenset({"dp", "a2a", "multimodal"}), no_graphs_counts=False,
           spec_reserve_mib=_SPEC_OLD, cap_graph_bs_at_running=False, deepep_mib=0),
    Regime("0.5.14", "srt/server_args.py:3276-3321, :2997-3057 (0.5.14)", _OLD_35, prefill_graphs=True,
           prefill_off_for=frozenset({"dp", "a2a", "multimodal"}), no_graphs_counts=False,
           spec_reserve_mib={}, cap_graph_bs_at_running=False, deepep_mib=0),
    Regime("0.5.15", "srt/server_args.py:3624-3696, :3341-3384 (0.5.15)", _OLD_35, prefill_graphs=True,
           prefill_off_for=frozenset({"mla", "a2a", "dp", "multimodal"}), no_graphs_counts=True,
           spec_reserve_mib={}, cap_graph_bs_at_running=False, deepep_mib=2 * _G),
    Regime("0.5.17", "srt/server_args.py:4753-4800, :4882-4922, :4452-4522 (0.5.17)", _OLD_35, prefill_graphs=True,
           prefill_off_for=frozenset({"mla"}), no_graphs_counts=True,
           spec_reserve_mib={}, cap_graph_bs_at_running=False, deepep_mib=2 * _G),
    Regime("0.5.18", "srt/server_args.py:4948-4996, :5078-5118 (0.5.18)", _OLD_35, prefill_graphs=True,
           prefill_off_for=frozenset(), no_graphs_counts=True,
           spec_reserve_mib={}, cap_graph_bs_at_running=False, deepep_mib=2 * _G),
    Regime("0.5.20", "srt/arg_groups/memory_hook.py:89-180, :274-392 (0.5.20)", (4096, 48, 160),
           prefill_graphs=True, prefill_off_for=frozenset(), no_graphs_counts=True,
           spec_reserve_mib={}, cap_graph_bs_at_running=False, deepep_mib=2 * _G),
    Regime("0.5.22", "srt/arg_groups/memory_hook.py:83-188, :281-414 (0.5.23)", (4096, 48, 160),
           prefill_graphs=True, prefill_off_for=frozenset(), no_graphs_counts=True,
           spec_reserve_mib={}, cap_graph_bs_at_running=True, deepep_mib=2 * _G),
)


def regime(version: str) -> Regime:
    """The newest regime at or below `version` (the oldest for a version older than all)."""
    key = versions.version_key(version)
    best = REGIMES[0]
    for r in REGIMES:
        if versions.version_key(r.since) <= key:
            best = r
    return best


@dataclass(frozen=True)
class Reserve:
    """What the version keeps outside --mem-fraction-static for one server's GPUs (per GPU)."""

    fraction: float  # the --mem-fraction-static SGLang would choose itself for this server
    gpu_mib: float
    parts: tuple[tuple[str, float], ...]  # (what, MiB), before the floor and the multimodal share
    # what start-up itself allocates there (metadata, communication buffers, CUDA graphs, DP padding,
    # DeepEP buffers, a draft's share): the reserve less its rule-of-thumb terms (the prefill's
    # activations at 1.5 MiB a token, the 10 GiB floor, the multimodal share), which SGLang's own
    # published commands often leave less room for
    allocated_mib: float
    source: str  # "SGLang 0.5.23 (srt/arg_groups/memory_hook.py:83-188, :281-414 (0.5.23))"

    @property
    def bytes(self) -> int:
        """The whole reserve per GPU: what the default fraction leaves."""
        return int(self.gpu_mib * (1 - self.fraction) * MIB)

    def why(self) -> str:
        """The reserve's terms, one phrase: "activations 12.0 GiB (8,192-token prefill chunks), …"."""
        return ", ".join(f"{what} {mib / 1024:.1f} GiB" for what, mib in self.parts if mib)


def _flag(settings: Mapping[str, Sequence[str]], *names: str) -> str | None:
    for name in names:
        values = settings.get(name)
        if values is not None:
            return values[0] if values else ""
    return None


def _int_flag(settings: Mapping[str, Sequence[str]], *names: str) -> int | None:
    value = _flag(settings, *names)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _band(r: Regime, gpu_mib: float, tp: int) -> tuple[int, int]:
    """The version's defaults for a GPU this size: (chunked-prefill tokens, decode graphs' largest batch)."""
    small = tp < 4
    if gpu_mib < 20 * _G:
        return 2048, 8
    if gpu_mib < 35 * _G:
        chunk, bs_small, bs_large = r.band_35
        return chunk, bs_small if small else bs_large
    if gpu_mib < 60 * _G:
        return 4096, 32 if small else 160
    if gpu_mib < 160 * _G:
        return 8192, 256 if small else 512
    return 16384, 512


def _prefill_graph_sizes(chunk: int) -> int:
    """How many token counts prefill graphs are captured for, up to a chunk (every version's generator)."""
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, chunk + 1, 512)]
    return len([s for s in sizes if s <= chunk])


def _settings(r: Regime, gpu_mib: float, tp: int,
              settings: Mapping[str, Sequence[str]]) -> tuple[int, int, bool, int, str]:
    """What the reserve reads of a command line, the version's defaults filled in: (chunked-prefill
    tokens, decode graphs' largest batch, whether graph terms count, DP-attention width, speculative
    algorithm or "")."""
    default_chunk, default_bs = _band(r, gpu_mib, tp)
    chunk = _int_flag(settings, "--chunked-prefill-size") or default_chunk
    bs = _int_flag(settings, "--cuda-graph-max-bs-decode", "--cuda-graph-max-bs")
    running = _int_flag(settings, "--max-running-requests")
    if bs is None:
        bs = min(default_bs, running) if r.cap_graph_bs_at_running and running else default_bs
    graphs = _flag(settings, "--disable-cuda-graph") is None or not r.no_graphs_counts
    dp = _int_flag(settings, "--attn-dp-size") or ((_int_flag(settings, "--dp-size", "--data-parallel-size") or 1)
                                                    if _flag(settings, "--enable-dp-attention") is not None else 1)
    return chunk, bs, graphs, dp, (_flag(settings, "--speculative-algorithm") or "").upper()


def reserve(version: str, gpu_bytes: int, tp: int, settings: Mapping[str, Sequence[str]], *, mla: bool,
            vision: tuple[int, int] | None = None, pp: int = 1) -> Reserve:
    """What SGLang `version` keeps outside --mem-fraction-static on each of a server's GPUs of
    `gpu_bytes`, for its flags `settings` ({flag: values}: --chunked-prefill-size, the decode graphs'
    largest batch, --max-running-requests, --disable-cuda-graph, --speculative-algorithm, DP attention
    and --dp-size, --moe-a2a-backend); `mla`: the model's attention is MLA; `vision`: its vision
    tower's (num_hidden_layers, hidden_size) as SGLang reads them (24 and 1024 when the config says
    none), None for a text-only model."""
    r = regime(version)
    gpu_mib = gpu_bytes / MIB
    chunk, bs, graphs, dp, algorithm = _settings(r, gpu_mib, tp, settings)
    present = {what for what, on in (("spec", bool(algorithm)), ("dp", dp > 1), ("mla", mla),
                                     ("multimodal", vision is not None),
                                     ("a2a", _flag(settings, "--moe-a2a-backend") not in (None, "none")))
               if on}
    parts: list[tuple[str, float]] = [
        ("attention metadata", 512.0),
        (f"activations ({max(chunk, 2048):,}-token prefill chunks)", max(chunk, 2048) * 1.5),
        (f"TP{tp} communication", tp * pp / 8 * 1024),
    ]
    if dp > 1:  # (the graphs' padding, reserved whether or not they are captured)
        parts.append((f"DP attention x{dp} padding", bs * dp * 3.0 + (bs * dp * 1.5 if bs > 300 else 0.0)))
    if graphs:
        parts.append((f"decode CUDA graphs (batch <= {bs})", bs * 2.0))
        if (r.prefill_graphs and not present & r.prefill_off_for
                and _flag(settings, "--disable-piecewise-cuda-graph", "--disable-prefill-cuda-graph") is None):
            parts.append(("prefill CUDA graphs", 1.5 * 1024 if mla else _prefill_graph_sizes(chunk) * 8.0))
    mib = sum(m for _, m in parts)
    allocated = mib - parts[1][1]  # (all but the activations)
    if gpu_mib > 60 * _G and mib < 10 * _G:
        parts.append(("SGLang's floor on GPUs over 60 GiB", 10 * _G - mib))
        mib = 10 * _G
    if r.deepep_mib and graphs and _flag(settings, "--moe-a2a-backend") == "deepep":
        parts.append(("DeepEP all-to-all buffers", float(r.deepep_mib)))
        mib += r.deepep_mib
        allocated += r.deepep_mib
    extra = r.spec_reserve_mib.get(algorithm, r.spec_reserve_mib.get("*", 0)) if algorithm else 0
    if extra:
        parts.append((f"{algorithm} draft and its graphs", float(extra)))
        mib += extra
        allocated += extra
    fraction = round((gpu_mib - mib) / gpu_mib, 3)
    if vision is not None:
        layers, hidden = vision
        ratio = layers * hidden ** 2 / (24 * _G ** 2)
        factor = 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))
        parts.append(("vision tower's images", gpu_mib * fraction * (1 - factor)))
        fraction *= factor
    return Reserve(fraction=fraction, gpu_mib=gpu_mib, parts=tuple(parts), allocated_mib=allocated,
                   source=f"SGLang {version} ({r.source})")


def vision_of(tower: tuple[int | None, int | None] | None) -> tuple[int, int] | None:
    """A vision tower's (num_hidden_layers, hidden_size) as SGLang reads them: 24 and 1024 (its ViT-L/14
    baseline) where the config names none."""
    if tower is None:
        return None
    layers, hidden = tower
    return layers or 24, hidden or 1024


def warning(r: Reserve, mem_fraction: float) -> str | None:
    """What a plan says when its --mem-fraction-static leaves less than start-up itself allocates
    outside it (CUDA graphs and buffers); None when it leaves that much. Leaving less than the
    version's whole default reserve is not warned of: SGLang's own published commands do that often
    (with 0.88 on an H100 where its default is 0.83)."""
    left_mib = r.gpu_mib * (1 - mem_fraction)
    if left_mib >= r.allocated_mib:
        return None
    return (f"--mem-fraction-static {mem_fraction:g} leaves {left_mib / 1024:.1f} GiB of each GPU outside weights and "
            f"KV cache, less than the {r.allocated_mib / 1024:.1f} GiB of CUDA graphs and buffers "
            f"{r.source.split(' (')[0]} allocates there at these settings ({r.why()}): start-up is likely to run out "
            f"of memory capturing them; --mem-fraction-static {math.floor(r.fraction * 1000) / 1000:g} is SGLang's own "
            "choice here")
