"""Proves the multi-host harness is real: isolated hosts, real sshd, real Slurm, real
torchrun rendezvous across namespaces, and a teardown that leaves nothing behind."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed import SlurmCluster, Testbed, cleanup_stale
from testbed.processes import cmdline, pids_in_netns
from tests.procs import outputs

pytestmark = pytest.mark.integration

TORCH_SCRIPT = """\
import os, socket
import torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
os.write(1, f"RANK={dist.get_rank()} WORLD={dist.get_world_size()} SUM={int(t.item())} "
            f"HOST={socket.gethostname()}\\n".encode())
dist.barrier()
dist.destroy_process_group()
os._exit(0)
"""


def wait_until(cond, timeout: float = 10.0, step: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return bool(cond())


# ------------------------------------------------------------------ network + ssh
def test_ssh_hostname_and_resolution(testbed: Testbed) -> None:
    for host in testbed.hosts:
        out = testbed.ssh.ssh(host, "hostname; getent ahostsv4 " + " ".join(testbed.hosts)).stdout
        lines = out.splitlines()
        assert lines[0] == host
        for other in testbed.hosts:
            ip = re.escape(testbed.host_ip(other))
            assert re.search(rf"^{ip}\s+STREAM\s+{other}$", out, re.M), out


def test_ssh_finds_same_python_without_bashrc(testbed: Testbed) -> None:
    """sshd's SetEnv PATH (not ~/.bashrc) must already point at our python3/torchrun, and
    root's login reads no .bashrc of this machine's (its home is the testbed's)."""
    cmd = (
        "tr '\\0' '\\n' < /proc/$$/environ | grep ^PATH=; command -v python3 torchrun; "
        "python3 -c 'import sys; print(sys.prefix)'; echo $HOME; ls -A ~"
    )
    out = testbed.ssh.ssh("node1", cmd).stdout.splitlines()
    assert out[4] == str(testbed.login_home) != str(Path.home()), out
    assert ".bashrc" not in out[5:], out
    assert out[0].startswith(f"PATH={Path(sys.executable).parent}:"), out
    assert out[1].endswith("/python3"), out
    assert out[2].endswith("/torchrun"), out
    assert out[3] == sys.prefix


def test_host_keys_checked(testbed: Testbed) -> None:
    ssh = testbed.ssh
    without = ssh.known_hosts_without("node2")
    cp = ssh.ssh("node2", "true", check=False, options=["-o", f"UserKnownHostsFile={without}"])
    assert cp.returncode == 255, cp.stderr
    assert "Host key verification failed" in cp.stderr, cp.stderr
    wrong = ssh.write_known_hosts(ssh.dir / "known_hosts.wrong", wrong_key=["node2"])
    cp = ssh.ssh("node2", "true", check=False, options=["-o", f"UserKnownHostsFile={wrong}"])
    assert cp.returncode == 255, cp.stderr
    assert "IDENTIFICATION HAS CHANGED" in cp.stderr, cp.stderr
    assert ssh.ssh("node1", "true", options=["-o", f"UserKnownHostsFile={without}"]).returncode == 0


def test_no_route_outside(testbed: Testbed) -> None:
    """No default route in any namespace: a route lookup (no packet sent) must fail."""
    for where in [*testbed.hosts, testbed.head, testbed.bridge_ns]:
        assert testbed.run(where, ["ip", "route", "show", "default"]).stdout.strip() == ""
        cp = testbed.run(where, ["ip", "route", "get", "192.0.2.1"], check=False)
        assert cp.returncode != 0, (where, cp.stderr)
        assert "unreachable" in cp.stderr, (where, cp.stderr)
    addrs = testbed.run("node1", ["ip", "-4", "-o", "addr"]).stdout
    assert f"{testbed.host_ip('node1')}/24" in addrs
    assert "eth0" in addrs


def test_head_and_hosts_know_each_other_without_arp(testbed: Testbed) -> None:
    """The head holds a permanent entry for every host's real interface address, and every
    host one for the head's: a connect burst to hundreds of hosts does not hang on ARP."""
    head_ip = testbed.host_ip(testbed.head)
    macs = {}
    for where in [*testbed.hosts, testbed.head]:
        link = testbed.run(where, ["ip", "-o", "link", "show", "eth0"]).stdout
        macs[testbed.host_ip(where)] = re.search(r"link/ether (\S+)", link).group(1)  # type: ignore[union-attr]
    head = testbed.run(testbed.head, ["ip", "neigh", "show", "nud", "permanent"]).stdout
    for host in testbed.hosts:
        ip = testbed.host_ip(host)
        assert f"{ip} dev eth0 lladdr {macs[ip]} PERMANENT" in head
        own = testbed.run(host, ["ip", "neigh", "show", "nud", "permanent"]).stdout
        assert own.strip() == f"{head_ip} dev eth0 lladdr {macs[head_ip]} PERMANENT"
    assert len(set(macs.values())) == len(macs)


def test_pids_per_namespace(clean_testbed: Testbed) -> None:
    tb = clean_testbed
    assert wait_until(lambda: tb.pids_in("node2") == []), tb.describe_pids("node2")
    p = tb.exec("node2", ["sleep", "60"])
    assert wait_until(lambda: p.pid in tb.pids_in("node2"))
    assert p.pid not in tb.pids_in("node1")
    assert p.pid not in pids_in_netns("/proc/1/ns/net")
    # a detached process started over ssh is found too, by namespace
    tb.ssh.ssh("node3", "setsid sleep 61 >/dev/null 2>&1 < /dev/null &")
    assert wait_until(lambda: any("sleep 61" in d for d in tb.describe_pids("node3")))
    killed = tb.reset()
    assert any("sleep 61" in k for k in killed), killed
    assert any("sleep 60" in k for k in killed), killed
    assert wait_until(lambda: tb.pids_in("node2") == [] and tb.pids_in("node3") == [])
    assert tb.ssh.sshd_pid("node2") in tb.pids_in("node2", include_daemons=True)


def test_sshd_down_and_link_cut(clean_testbed: Testbed) -> None:
    tb = clean_testbed
    tb.ssh.stop_sshd("node3")
    cp = tb.ssh.ssh("node3", "true", check=False)
    assert cp.returncode == 255, cp.stderr
    assert "Connection refused" in cp.stderr, cp.stderr
    tb.ssh.start_sshd("node3")
    assert tb.ssh.ssh("node3", "hostname").stdout.strip() == "node3"
    tb.cut_link("node2")
    t0 = time.monotonic()
    cp = tb.ssh.ssh("node2", "true", check=False, options=["-o", "ConnectTimeout=1"])
    assert cp.returncode == 255, cp.stderr
    assert "timed out" in cp.stderr, cp.stderr
    assert time.monotonic() - t0 < 5
    tb.restore_link("node2")
    assert tb.ssh.ssh("node2", "hostname").stdout.strip() == "node2"


def test_thread_can_enter_head_namespace(testbed: Testbed) -> None:
    """In-process clients (asyncssh in the test loop) can connect from the head ns."""
    before = os.stat("/proc/thread-self/ns/net").st_ino
    with testbed.entered(testbed.head):
        assert os.stat("/proc/thread-self/ns/net").st_ino == os.stat(testbed.ns_path("head")).st_ino
        with socket.create_connection((testbed.host_ip("node1"), 22), timeout=5) as s:
            assert s.getsockname()[0] == testbed.head_ip
            assert s.recv(64).startswith(b"SSH-2.0-")
    # back in the machine's namespace (never connect from there: it has a real route out)
    assert os.stat("/proc/thread-self/ns/net").st_ino == before


async def test_asyncssh_in_process_from_head(testbed: Testbed) -> None:
    """The console's own SSH client (asyncssh) works in-process with the generated
    ssh_config/known_hosts once the socket is created inside the head namespace."""
    import asyncssh

    cfg = [str(testbed.ssh.ssh_config)]
    with testbed.entered(testbed.head):
        conn = await asyncssh.connect("node2", config=cfg)
    async with conn:
        result = await conn.run("hostname; command -v torchrun", check=True)
    assert str(result.stdout).split()[0] == "node2"
    assert str(result.stdout).split()[1].endswith("/torchrun")
    unknown = str(testbed.ssh.known_hosts_without("node3"))
    with testbed.entered(testbed.head), pytest.raises(asyncssh.HostKeyNotVerifiable):
        await asyncssh.connect("node3", config=cfg, known_hosts=unknown)


def test_torchrun_two_nodes_over_ssh(clean_testbed: Testbed) -> None:
    tb = clean_testbed
    script = tb.workdir / "allreduce.py"
    script.write_text(TORCH_SCRIPT)
    procs = {}
    for host in ("node1", "node2"):
        cmd = (
            f"cd {tb.workdir} && GLOO_SOCKET_IFNAME={tb.ifname} exec torchrun --nnodes=2 "
            f"--nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=node1:29500 "
            f"--rdzv-id=tbtest --local-addr={tb.host_ip(host)} {script}"
        )
        procs[host] = tb.exec(
            tb.head,
            tb.ssh.ssh_argv(host, cmd),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    outs = {}
    for host, p in procs.items():
        out, err = outputs(p, 120)
        assert p.returncode == 0, (host, out, err[-3000:])
        outs[host] = out
    ranks = {}
    for host, out in outs.items():
        for m in re.finditer(r"RANK=(\d) WORLD=4 SUM=10 HOST=(\S+)", out):
            ranks[int(m.group(1))] = (host, m.group(2))
    assert sorted(ranks) == [0, 1, 2, 3], outs
    assert {r: h for r, (h, _) in ranks.items()} == {0: "node1", 1: "node1", 2: "node2", 3: "node2"}
    assert all(h == hostname for h, hostname in ranks.values())
    assert wait_until(lambda: tb.pids_in("node1") == [] and tb.pids_in("node2") == [], 10), (
        tb.describe_pids("node1") + tb.describe_pids("node2")
    )


# ------------------------------------------------------------------------ slurm
def test_srun_three_nodes(slurm_cluster: SlurmCluster) -> None:
    out = slurm_cluster.run(["srun", "-N3", "hostname"]).stdout.split()
    assert sorted(out) == ["node1", "node2", "node3"]
    out = slurm_cluster.run(
        [
            "srun",
            "-N1",
            "sh",
            "-c",
            "command -v torchrun; python3 -c 'import sys; print(sys.prefix)'",
        ]
    ).stdout.split()
    assert out[0].endswith("/torchrun")
    assert out[1] == sys.prefix


def test_salloc_srun_jobid_scancel(slurm_cluster: SlurmCluster) -> None:
    cp = slurm_cluster.run(["salloc", "-N2", "--no-shell"])
    m = re.search(r"Granted job allocation (\d+)", cp.stderr)
    assert m, cp.stderr
    job = m.group(1)
    assert job in slurm_cluster.squeue_ids()
    out = slurm_cluster.run(["srun", f"--jobid={job}", "-N2", "hostname"]).stdout.split()
    assert len(set(out)) == 2
    assert set(out) <= set(slurm_cluster.nodes)
    states = {j["job_id"]: j["job_state"] for j in slurm_cluster.squeue_json()}
    assert "RUNNING" in str(states[int(job)])
    slurm_cluster.run(["scancel", job])
    assert wait_until(lambda: job not in slurm_cluster.squeue_ids(), 20)
    assert wait_until(lambda: set(slurm_cluster.node_states().values()) == {"idle"}, 20)


def test_torchrun_under_srun(slurm_cluster: SlurmCluster) -> None:
    tb = slurm_cluster.tb
    script = tb.workdir / "allreduce_srun.py"
    script.write_text(TORCH_SCRIPT)
    cmd = (
        f"GLOO_SOCKET_IFNAME={tb.ifname} exec torchrun --nnodes=2 --nproc-per-node=2 "
        f"--rdzv-backend=c10d --rdzv-endpoint=node1:29501 --rdzv-id=srun "
        f"--local-addr=$(getent ahostsv4 $(hostname) | head -1 | cut -d' ' -f1) {script}"
    )
    cp = slurm_cluster.run(
        ["srun", "-N2", "--ntasks-per-node=1", "-w", "node1,node2", "sh", "-c", cmd], timeout=120
    )
    ranks = sorted(int(r) for r in re.findall(r"RANK=(\d) WORLD=4 SUM=10", cp.stdout))
    assert ranks == [0, 1, 2, 3], (cp.stdout, cp.stderr[-3000:])


# --------------------------------------------------------------------- teardown
def test_teardown_leaves_nothing() -> None:
    tb = Testbed(["a1", "a2"], sshd=True).start()
    try:
        cluster = SlurmCluster(tb).start()
        assert sorted(cluster.run(["srun", "-N2", "hostname"]).stdout.split()) == ["a1", "a2"]
        tb.ssh.ssh("a1", "setsid sleep 300 >/dev/null 2>&1 < /dev/null &")
        tb.exec(tb.head, ["sleep", "300"])
        assert wait_until(lambda: any("sleep 300" in d for d in tb.describe_pids("a1")))

        def every_pid() -> set[int]:
            pids = {p for ns in tb.namespaces for p in pids_in_netns(f"/run/netns/{ns}")}
            return pids | {p.pid for p in cluster._procs}  # munged lives outside them

        # sshd x2, slurmd x2, the sleeps, ctld+munged (the head's sleep may not be up yet)
        assert wait_until(lambda: len(every_pid()) >= 2 + 2 + 2 + 3), every_pid()
        pids = every_pid()
        namespaces, workdir = tb.namespaces, tb.workdir
        cluster.stop()
    finally:
        tb.close()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not any(ns in listed.split() for ns in namespaces), listed
    assert not any(Path("/etc/netns", ns).exists() for ns in namespaces)
    assert not workdir.exists()
    alive = [p for p in pids if _running(p)]
    assert alive == [], alive
    assert any("sleep 300" in c for _, c in tb.leftovers)  # the stray was found and killed


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_cleanup_stale_after_harness_killed() -> None:
    """A harness SIGKILLed mid-run leaves daemons behind; cleanup_stale removes them."""
    code = (
        "import time; from testbed import Testbed, SlurmCluster; "
        "tb = Testbed(['z1'], sshd=True).start(); SlurmCluster(tb).start(); "
        "print(tb.prefix, tb.workdir, flush=True); time.sleep(120)"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=Path(__file__).parents[2],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        prefix, workdir = p.stdout.readline().split()  # type: ignore[union-attr]
    finally:
        p.kill()
        p.wait()
    namespaces = [f"{prefix}-{s}" for s in ("br", "head", "h1")]
    pids = {pid for ns in namespaces for pid in pids_in_netns(f"/run/netns/{ns}")}
    assert len(pids) >= 3, pids  # sshd, slurmd, slurmctld survive their harness
    removed = cleanup_stale()
    assert sorted(removed) == sorted(namespaces)
    assert [p for p in pids if _running(p)] == []
    assert not Path(workdir).exists()
    assert not any(Path("/etc/netns", n).exists() for n in namespaces)
    assert not any(workdir in cmdline(int(e)) for e in os.listdir("/proc") if e.isdigit())
