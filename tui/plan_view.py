"""Rich renderables for a plan, shared by `gpuops plan` and the plan review screen."""

from __future__ import annotations

from rich.console import Group
from rich.text import Text

from ..core import engines, units
from ..core.literal import literal

GIB = 1024**3


def facts_line(facts) -> Text:
    """"MoE 256 experts 8+1 active · hybrid linear attention (12 of 48 layers full) · 1 MTP layer · BF16 · 262k"."""
    parts: list[str] = []
    parts.append(literal(facts.architecture or facts.model_type or "unknown architecture"))  # (config.json's)
    if facts.moe is not None:
        shared = f"+{facts.moe.shared_experts}" if facts.moe.shared_experts else ""
        parts.append(f"MoE {facts.moe.num_experts} experts {facts.moe.active_experts}{shared} active")
    else:
        parts.append("dense")
    if facts.hybrid is not None:
        total = facts.hybrid.full_attention_layers + facts.hybrid.linear_attention_layers
        parts.append(f"hybrid linear attention ({facts.hybrid.full_attention_layers} of {total} layers full)")
    if facts.mla is not None:
        parts.append(f"MLA (kv rank {facts.mla.kv_lora_rank})")
    if facts.mtp_layers:
        parts.append(f"{facts.mtp_layers} MTP layer{'s' if facts.mtp_layers > 1 else ''}")
    quant = facts.quant.method.upper() if facts.quant else (facts.dtype or "?").upper().replace("BFLOAT16", "BF16")
    parts.append(literal(quant))
    if facts.context_length:
        ctx = facts.context_length
        parts.append(f"{ctx // 1024}k context" if ctx % 1024 == 0 else f"{ctx:,} context")
    size = Text(" · ".join(parts))
    params = f"{facts.params / 1e9:.1f}B params"
    if facts.active_params and facts.active_params != facts.params:
        params += f" ({facts.active_params / 1e9:.1f}B active)"
    size.append(f"\n{params}, checkpoint {units.size(facts.checkpoint_bytes)} "
                f"({literal(facts.checkpoint_bytes_source)})", style="dim")
    return size


def fit_bars(plan, width: int = 48) -> Group:
    """One bar per GPU: weights | state | KV cache | what the engine keeps free."""
    fit = plan.fit
    total = max(1, fit.gpu_memory_bytes)
    rows = []
    for gpu in plan_gpus(plan):
        parts = [
            (fit.weights_per_gpu_bytes, "█", "bold magenta"),
            (fit.state_cache_per_gpu_bytes, "█", "cyan"),
            (fit.kv_cache_per_gpu_bytes, "█", "green"),
        ]
        used = 0
        line = Text(f"GPU{gpu:<2} ")
        for nbytes, ch, style in parts:
            cells = min(width - used, round(width * nbytes / total))
            line.append(ch * cells, style=style)
            used += cells
        line.append("░" * (width - used), style="dim")
        line.append(f" {total / GIB:.1f} GiB")
        rows.append(line)
    legend = Text.assemble(
        ("█", "bold magenta"), f" weights {fit.weights_per_gpu_bytes / GIB:.1f}  ",
        ("█", "cyan"), f" state {fit.state_cache_per_gpu_bytes / GIB:.1f}  ",
        ("█", "green"), f" KV {fit.kv_cache_per_gpu_bytes / GIB:.1f}  ",
        ("░", "dim"), f" kept free {(1 - fit.mem_fraction_static) * 100:.0f}%"
        + (f" ({engines.get(plan.engine).title}'s default keeps {fit.startup_reserve_bytes / total * 100:.0f}%)"
           if fit.startup_reserve_bytes else "")
        + "  (GiB per GPU)",
    )
    return Group(*rows, legend)


def plan_gpus(plan) -> list[int]:
    """The GPUs one server of the plan uses (node 0's; the first replica's: each is fitted alike)."""
    return list(plan.replicas[0].gpu_ids if plan.replicas else plan.gpu_ids)


def where_text(plan) -> str:
    """Where the plan's servers run, one line: "GPUs 0,1", "gpu1 GPUs 0-3 + gpu2 GPUs 0-3" (the nodes),
    "2 replicas: gpu1 GPUs 0, gpu1 GPUs 1"."""
    def gpus(ids) -> str:
        return "GPUs " + ",".join(map(str, ids))

    if plan.members:
        return " + ".join(f"{m.host} {gpus(m.gpu_ids)}" for m in plan.members)
    if plan.replicas:
        return f"{len(plan.replicas)} replicas: " + ", ".join(f"{r.host} {gpus(r.gpu_ids)}" for r in plan.replicas)
    return gpus(plan.gpu_ids)


def launch_title(plan) -> str:
    """The launch command's title: the router's for replicas (the replicas' own are in the parts)."""
    engine = engines.get(plan.engine)
    return f"router ({engine.router_title(plan.router)})" if plan.replicas else f"launch ({engine.title} {plan.engine_version})"


# what a plan made offline runs the server with: the python of the host it is deployed on (bound then)
HOST_PYTHON = "<host python>"


def launch_text(plan) -> Text:
    out = Text()
    for k, v in sorted(plan.env.items()):
        out.append(f"{k}={v} ", style="yellow")
    if plan.env:
        out.append("\\\n")
    out.append(f"{plan.python or HOST_PYTHON} -m {plan.module}")
    from ..core.domain import split_flags

    for name, values in split_flags(plan.argv):
        out.append(" \\\n  ")
        out.append(name, style="bold cyan")
        if values:
            out.append(" " + " ".join(values))
    return out


def rules_table(plan):
    """Every rule that fired: what it added or removed, and why (wraps to the width)."""
    from rich.table import Table

    table = Table(box=None, header_style="bold", padding=(0, 1), expand=True)
    table.add_column("rule", no_wrap=True)
    table.add_column("adds / removes", ratio=1)
    table.add_column("why", ratio=1)
    for r in plan.rules:
        change = Text(" ".join(r.adds), style="green")
        if r.removes:
            change.append(("  " if r.adds else "") + "−" + " ".join(r.removes), style="red")
        table.add_row(Text(literal(r.id)), change, Text(literal(r.why)))  # (Text: a str cell is read as markup)
    return table


def parts_text(plan) -> tuple[str, Text] | None:
    """A plan of several servers, one line a part: each node of a multi-node plan (its host, GPUs,
    launcher, own env; node 0 with the rendezvous) or each replica behind the router; with the
    panel's title. None for a plan of one server."""
    text = Text()
    if plan.members:
        for m in plan.members:
            own = " ".join(f"{k}={v}" for k, v in sorted(m.env.items()))
            text.append(f"node {m.node_rank}: ", style="bold")
            text.append(f"{m.host}, GPUs {','.join(map(str, m.gpu_ids))}, {m.launcher} launcher"
                        + (f", {own}" if own else "") + (" · rendezvous " + str(plan.dist_init_addr)
                                                        if m.node_rank == 0 else "") + "\n")
        return f"{plan.nnodes} nodes: one server each, --node-rank R", text
    if plan.replicas:
        for r, url in zip(plan.replicas, plan.worker_urls):
            text.append(f"{r.name}: ", style="bold")
            text.append(f"{r.host}, TP{r.tp} on GPUs {','.join(map(str, r.gpu_ids))}, port {r.port} ({url}), "
                        f"{r.launcher} launcher\n")
        return f"{len(plan.replicas)} replicas behind {engines.get(plan.engine).router_title(plan.router)} at {plan.host}:{plan.port}", text
    return None
