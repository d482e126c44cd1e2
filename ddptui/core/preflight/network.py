"""Provides the network preflight rules: the rendezvous port, hostname resolution, clocks."""

from __future__ import annotations

from ddptui.core.job.plan import NodeTarget
from ddptui.core.preflight.model import (
    FAIL,
    MAX_SKEW_S,
    OK,
    SKIP,
    WARN,
    Finding,
    Observations,
    is_loopback,
    skip_dead,
)


def check_rdzv_port(obs: Observations) -> list[Finding]:
    out = skip_dead(obs, "rdzv-port")
    live = obs.live
    if not obs.nodes or not live:
        return out
    head, port = obs.nodes[0], obs.port
    if head not in live or obs.listen is None:
        return out + [Finding(n.name, "rdzv-port", SKIP, "first node not reached") for n in live]
    if not obs.listen.get("listening"):
        fix = (
            f"stop what holds port {port} on {head.name} (`ss -ltnp 'sport = :{port}'`), or "
            "choose another with --rdzv-port"
        )
        why = f"port {port} cannot be opened here: {obs.listen.get('error', '?')}"
        out.append(Finding(head.name, "rdzv-port", FAIL, why, fix))
        rest = [n for n in live if n != head]
        return out + [
            Finding(n.name, "rdzv-port", SKIP, "no listener on the first node") for n in rest
        ]
    target = f"{head.name} ({head.address}:{port})"
    for node in live:
        report = obs.connects.get(node.name)
        if report is None:
            out.append(Finding(node.name, "rdzv-port", SKIP, "not tried"))
        elif report.get("ok"):
            where = "listening; reached from itself" if node == head else f"reached {target}"
            out.append(Finding(node.name, "rdzv-port", OK, f"{where} in {report.get('ms')} ms"))
        elif report.get("banner"):
            why = f"{target} answered, but not ddptui's listener ({report['banner']!r})"
            out.append(Finding(node.name, "rdzv-port", FAIL, why, "choose another --rdzv-port"))
        else:
            fix = (
                f"open TCP port {port} on {head.name} to the other nodes (firewall, security "
                "group), or choose a reachable port with --rdzv-port"
            )
            why = f"cannot reach {target}: {report.get('error', '?')}"
            out.append(Finding(node.name, "rdzv-port", FAIL, why, fix))
    return out


def _own_addresses(obs: Observations, node: NodeTarget) -> set[str]:
    ifaces = obs.facts[node.name].get("ifaces", {})
    return {a for a in ifaces if not is_loopback(a)} | {node.address}


def check_hostname(obs: Observations) -> list[Finding]:
    out = skip_dead(obs, "hostname")
    if obs.backend == "local":
        why = "pseudo-nodes share this machine: ddptui uses 127.0.0.1 and GLOO_SOCKET_IFNAME=lo"
        return out + [Finding(n.name, "hostname", OK, why) for n in obs.live]
    for node in obs.live:
        facts = obs.facts[node.name]
        host, own = facts.get("hostname", node.name), facts.get("self", {})
        mine = _own_addresses(obs, node)
        addrs = list(own.get("addrs") or [])
        iface = facts.get("ifaces", {}).get(node.address, "IFACE")
        loop = [a for a in addrs if is_loopback(a)]
        if own.get("error") or not addrs:
            fix = f"add '{node.address} {host}' to /etc/hosts on {node.name} (or fix DNS)"
            why = f"its hostname {host!r} does not resolve here: {own.get('error', 'no address')}"
            out.append(Finding(node.name, "hostname", FAIL, why, fix))
        elif loop:
            fix = (
                f"on {node.name}, map {host} to {node.address} in /etc/hosts instead of {loop[0]} "
                f"(Debian's 127.0.1.1 line), or pass --socket-ifname {iface}"
            )
            why = (
                f"its hostname {host!r} resolves to {loop[0]} (loopback): Gloo/NCCL pick that "
                "address and the other nodes cannot connect (Gloo connectFullMesh failed)"
            )
            out.append(Finding(node.name, "hostname", FAIL, why, fix))
        elif not set(addrs) & mine:
            fix = f"map {host} to {node.address} in /etc/hosts (or DNS) on {node.name}"
            why = f"its hostname {host!r} resolves to {', '.join(addrs)}: not this node's address"
            out.append(Finding(node.name, "hostname", FAIL, why, fix))
        else:
            out.append(Finding(node.name, "hostname", OK, f"{host} -> {', '.join(addrs)}"))
        out += _peers_view(obs, node, host, mine)
    return out


def _peers_view(obs: Observations, node: NodeTarget, host: str, mine: set[str]) -> list[Finding]:
    """What every other node makes of this node's hostname."""
    out = []
    for peer in obs.live:
        if peer == node or peer.name not in obs.resolved:
            continue
        seen = obs.resolved[peer.name].get(host, {})
        addrs = list(seen.get("addrs") or [])
        if not addrs:
            fix = f"add '{node.address} {host}' to /etc/hosts on {peer.name} (or DNS)"
            why = (
                f"cannot resolve {node.name}'s hostname {host!r} (a manual torchrun's "
                "MASTER_ADDR would hang)"
            )
            out.append(Finding(peer.name, "hostname", WARN, why, fix))
        elif not set(addrs) & mine and not any(is_loopback(a) for a in addrs):
            fix = f"correct {host} in /etc/hosts (or DNS) on {peer.name}: it is {node.address}"
            shown = ", ".join(addrs)
            why = f"resolves {node.name}'s hostname {host!r} to {shown}, not {node.address}"
            out.append(Finding(peer.name, "hostname", FAIL, why, fix))
        elif not set(addrs) & mine:
            fix = f"map {host} to {node.address} in /etc/hosts on {peer.name}"
            why = f"resolves {node.name}'s hostname {host!r} to loopback {addrs[0]}"
            out.append(Finding(peer.name, "hostname", FAIL, why, fix))
    return out


def clock_offset(obs: Observations, node: str) -> tuple[float, float] | None:
    """(offset, half-width) of a node's clock against the console's: the node read its clock
    after the request was sent and `elapsed` before the reply arrived."""
    facts, timing = obs.facts.get(node, {}), obs.timing.get(node)
    if timing is None or "t_start" not in facts:
        return None
    sent, received = timing
    latest = received - float(facts.get("elapsed", 0.0))
    low, high = facts["t_start"] - max(latest, sent), facts["t_start"] - sent
    return (low + high) / 2, (high - low) / 2


def check_clock(obs: Observations) -> list[Finding]:
    out = skip_dead(obs, "clock")
    live = obs.live
    if obs.backend == "local":
        return out + [Finding(n.name, "clock", OK, "one machine, one clock") for n in live]
    offsets = {n.name: o for n in live if (o := clock_offset(obs, n.name)) is not None}
    if not offsets:
        return out + [Finding(n.name, "clock", SKIP, "no reading") for n in live]
    ref = next(n.name for n in live if n.name in offsets)
    ref_mid, ref_width = offsets[ref]
    fix = "keep the clocks in sync: run chrony or ntpd (or systemd-timesyncd) on every node"
    for node in live:
        if node.name not in offsets:
            out.append(Finding(node.name, "clock", SKIP, "no reading"))
            continue
        if node.name == ref:
            out.append(Finding(node.name, "clock", OK, "the reference clock"))
            continue
        mid, width = offsets[node.name]
        skew, within = mid - ref_mid, width + ref_width
        side = "ahead of" if skew > 0 else "behind"
        detail = f"{abs(skew):.2f} s {side} {ref} (±{within:.2f} s)"
        status = FAIL if abs(skew) - within > MAX_SKEW_S else OK
        out.append(Finding(node.name, "clock", status, detail, fix if status == FAIL else ""))
    return out
