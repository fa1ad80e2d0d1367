"""A one-node Slurm with real accounting, started for the tests without systemd.

Debian's `munge`, `mariadb-server`, `slurmdbd`, `slurmctld`, `slurmd` and `slurm-client` (Slurm
22.05 on Debian 12; `.ci/run` installs them), every file in one temporary folder, every
daemon in the foreground as a child of this process that the kernel kills if this process dies
(`PR_SET_PDEATHSIG`), so none outlives the test session. What works in these containers:
`ProctrackType=proctrack/linuxproc` and `TaskPlugin=task/none` (the cgroup plugins fail at job
launch), `SlurmUser=root`, munged as the `munge` user, the node line from `slurmd -C`.
Accounting is real: MariaDB and slurmdbd, because submitit reads job states from `sacct`.

`python -m tests.benchmark.leaderboard.slurm_cluster` starts one for a person to try the
launcher on; it prints the `SLURM_CONF` to export and stops the cluster on Ctrl-C.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

PACKAGES = ("munge", "mariadb-server", "slurmdbd", "slurmctld", "slurmd", "slurm-client")
PROGRAMS = ("munged", "mariadb-install-db", "mariadbd", "slurmdbd", "slurmctld", "slurmd", "sbatch")
CLUSTER = "circlebench"
PARTITION = "debug"
START_TIMEOUT_S = 120.0  # measured: about 15 s from nothing to an idle node on the 2-core VM
PR_SET_PDEATHSIG = 1
# Seconds after its requeue that a test's requeued job may start: slurmd compares job
# credentials by the second, and refuses one made in the second the last attempt was killed.
REQUEUE_DELAY_S = 2
# Run by the janitor: wait for EOF on stdin (the cluster's owner closed it, or died), then
# SIGKILL every process whose environment names this cluster's slurm.conf (argv[1]) and remove
# the cluster's folder (argv[2]).
JANITOR = """
import os, shutil, signal, sys
os.read(0, 1)
marker = sys.argv[1].encode()
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            mine = int(pid) in (os.getpid(), os.getppid())
            if marker in f.read().split(b"\\0") and not mine:
                os.kill(int(pid), signal.SIGKILL)
    except OSError:
        pass
shutil.rmtree(sys.argv[2], ignore_errors=True)
"""


def _later_than(begin: str, moment: datetime) -> bool:
    """Whether squeue's start time (`2026-11-26T10:19:25`, or N/A) is after `moment`."""
    try:
        return datetime.fromisoformat(begin) > moment
    except ValueError:
        return False


def unavailable() -> str | None:
    """Why a cluster cannot start here (not root, a program missing), or None."""
    if not sys.platform.startswith("linux"):
        return f"a test Slurm needs Linux, not {sys.platform}"
    if os.geteuid() != 0:
        return "a test Slurm needs root (SlurmUser=root, munged as the munge user)"
    missing = [p for p in PROGRAMS if shutil.which(p) is None]
    try:
        pwd.getpwnam("munge")
    except KeyError:
        missing.append("the munge user")
    if missing:
        return (
            f"{', '.join(missing)} not found; install Debian's {' '.join(PACKAGES)} (.ci/run does)"
        )
    return None


@dataclass
class SlurmCluster:
    """A running one-node cluster: export `env` (SLURM_CONF) to use it."""

    root: Path
    node: str
    cpus: int
    daemons: list[subprocess.Popen] = field(default_factory=list)
    janitor: subprocess.Popen | None = None
    janitor_pipe: int | None = None  # closing it (or dying) sets the janitor off

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    def command(self, *args: str, check: bool = True) -> str:
        """Run a Slurm client command (`squeue`, `sacct`, ...) on this cluster; its stdout."""
        done = subprocess.run(
            args, env={**os.environ, **self.env}, capture_output=True, text=True, timeout=60
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
        return done.stdout

    @contextlib.contextmanager
    def requeued_jobs_start_at_once(self) -> Iterator[None]:
        """Meanwhile, let requeued jobs start within seconds: Slurm makes a requeued job
        eligible only two minutes later (its BeginTime), which would be most of a test's time.
        Not at once: slurmd refuses to launch a job in the second its last attempt was killed
        ("Job credential revoked"; the requeued attempt then FAILED at once in CI), so the
        begin time moves to `REQUEUE_DELAY_S` from now, once per wait."""
        stop = threading.Event()

        def hurry() -> None:
            while not stop.wait(0.5):
                with contextlib.suppress(subprocess.TimeoutExpired):  # a busy slurmctld: retry
                    queue = self.command("squeue", "-h", "-t", "PD", "-o", "%i|%r|%S", check=False)
                    soon = datetime.now() + timedelta(seconds=REQUEUE_DELAY_S + 1)
                    for line in queue.splitlines():
                        job, reason, begin = [*line.split("|"), "", ""][:3]
                        if reason == "BeginTime" and _later_than(begin, soon):
                            start = f"StartTime=now+{REQUEUE_DELAY_S}"
                            self.command("scontrol", "update", f"JobId={job}", start, check=False)

        thread = threading.Thread(target=hurry, name="requeued-jobs-start-at-once", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def stop(self) -> None:
        """Cancel every job, wait for their steps to end, stop the daemons (newest first), then
        have the janitor end what is left and remove the cluster's folder."""
        with contextlib.suppress(Exception):
            self.command("scancel", "--full", "--quiet", "--user=root", check=False)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self.command("squeue", "-h", check=False):
                time.sleep(0.5)
        for daemon in reversed(self.daemons):
            if daemon.poll() is None:
                daemon.terminate()
        for daemon in reversed(self.daemons):
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        self.daemons.clear()
        if self.janitor_pipe is not None and self.janitor is not None:
            os.close(self.janitor_pipe)  # anything of this cluster still alive ends now
            self.janitor.wait(timeout=60)
            self.janitor_pipe = None


def start(root: Path | None = None) -> SlurmCluster:
    """Start munged, MariaDB, slurmdbd, slurmctld and slurmd with every file under `root`
    (a new folder in /tmp when None); raise RuntimeError, saying which daemon and its log, if
    the node is not idle within `START_TIMEOUT_S`. The caller must call `stop()`."""
    why = unavailable()
    if why is not None:
        raise RuntimeError(why)
    root = Path(tempfile.mkdtemp(prefix="circlebench-slurm-")) if root is None else root
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o755)  # munged, as the munge user, must reach its folder inside
    node_line = subprocess.run(["slurmd", "-C"], capture_output=True, text=True).stdout
    node_line = node_line.splitlines()[0]
    node = node_line.split()[0].removeprefix("NodeName=")
    cpus = int(node_line.split("CPUs=")[1].split()[0])
    cluster = SlurmCluster(root, node, cpus)
    deadline = time.monotonic() + START_TIMEOUT_S
    read, cluster.janitor_pipe = os.pipe()
    marker = f"SLURM_CONF={cluster.conf}"
    cluster.janitor = subprocess.Popen(
        [sys.executable, "-c", JANITOR, marker, str(root)], stdin=read, start_new_session=True
    )
    os.close(read)
    try:
        _start_munge(cluster)
        db_port, dbd_port, ctld_port, slurmd_port = _free_ports(4)
        password = secrets.token_hex(16)
        _start_mariadb(cluster, db_port, password, deadline)
        _write_configs(cluster, node_line, db_port, dbd_port, ctld_port, slurmd_port, password)
        _daemon(cluster, "slurmdbd", ["slurmdbd", "-D"])
        _wait_for(lambda: _sacctmgr_answers(cluster), deadline, cluster, "slurmdbd")
        _daemon(cluster, "slurmctld", ["slurmctld", "-D", "-i", "-f", str(cluster.conf)])
        _daemon(cluster, "slurmd", ["slurmd", "-D", "-f", str(cluster.conf)])
        _wait_for(lambda: _node_idle(cluster), deadline, cluster, "slurmd")
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _start_munge(cluster: SlurmCluster) -> None:
    munge = cluster.root / "munge"
    munge.mkdir()
    munge.chmod(0o755)  # clients must reach the socket; the key itself is 0400
    key = munge / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o400)
    user = pwd.getpwnam("munge")
    for path in (munge, key):
        os.chown(path, user.pw_uid, user.pw_gid)
    command = ["munged", "--foreground", f"--socket={munge / 'munge.socket'}"]
    command += [f"--key-file={key}", f"--pid-file={munge / 'munged.pid'}"]
    command += [f"--log-file={munge / 'munged.log'}", f"--seed-file={munge / 'munged.seed'}"]
    _daemon(cluster, "munged", command, user="munge")
    socket_path = munge / "munge.socket"
    _wait_for(socket_path.exists, time.monotonic() + 20, cluster, "munged")


def _start_mariadb(cluster: SlurmCluster, port: int, password: str, deadline: float) -> None:
    data = cluster.root / "mysql"
    install = ["mariadb-install-db", "--no-defaults", f"--datadir={data}", "--user=root"]
    install += ["--auth-root-authentication-method=socket", "--skip-test-db"]
    done = subprocess.run(install, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"mariadb-install-db failed: {done.stderr[-2000:]}")
    init = cluster.root / "mysql-init.sql"
    init.write_text(
        f"CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '{password}';\n"
        "GRANT ALL ON *.* TO 'slurm'@'127.0.0.1';\n"
    )
    command = ["mariadbd", "--no-defaults", f"--datadir={data}", "--user=root"]
    command += [f"--socket={data / 'mysqld.sock'}", f"--port={port}", "--bind-address=127.0.0.1"]
    command += ["--skip-name-resolve", f"--init-file={init}", f"--log-error={data / 'error.log'}"]
    command += [f"--pid-file={data / 'mysqld.pid'}", "--innodb-buffer-pool-size=32M"]
    _daemon(cluster, "mariadbd", command)
    _wait_for(lambda: _port_open(port), deadline, cluster, "mariadbd")


def _write_configs(
    cluster: SlurmCluster,
    node_line: str,
    db_port: int,
    dbd_port: int,
    ctld_port: int,
    slurmd_port: int,
    password: str,
) -> None:
    root = cluster.root
    for folder in ("state", "spool", "log"):
        (root / folder).mkdir()
    auth = f"AuthType=auth/munge\nAuthInfo=socket={root / 'munge' / 'munge.socket'}\n"
    dbd = root / "slurmdbd.conf"
    dbd.write_text(
        auth + f"DbdHost=localhost\nDbdAddr=127.0.0.1\nDbdPort={dbd_port}\nSlurmUser=root\n"
        f"PidFile={root / 'state' / 'slurmdbd.pid'}\nLogFile={root / 'log' / 'slurmdbd.log'}\n"
        "StorageType=accounting_storage/mysql\nStorageHost=127.0.0.1\n"
        f"StoragePort={db_port}\nStorageUser=slurm\nStoragePass={password}\n"
        f"StorageLoc={CLUSTER}_acct_db\n"
    )
    dbd.chmod(0o600)  # slurmdbd refuses a config others can read (it holds the password)
    cluster.conf.write_text(
        auth + f"ClusterName={CLUSTER}\nSlurmctldHost={cluster.node}(127.0.0.1)\n"
        f"SlurmctldPort={ctld_port}\nSlurmdPort={slurmd_port}\n"
        "SlurmUser=root\nSlurmdUser=root\n"
        f"StateSaveLocation={root / 'state'}\nSlurmdSpoolDir={root / 'spool'}\n"
        f"SlurmctldPidFile={root / 'state' / 'slurmctld.pid'}\n"
        f"SlurmdPidFile={root / 'state' / 'slurmd.pid'}\n"
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}\n"
        f"SlurmdLogFile={root / 'log' / 'slurmd.log'}\n"
        "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
        "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
        "SchedulerType=sched/backfill\nReturnToService=2\nJobRequeue=1\n"
        # Quick turnaround for tests: jobs leave squeue soon after ending, kills are quick.
        "MinJobAge=5\nKillWait=5\nMessageTimeout=20\n"
        "AccountingStorageType=accounting_storage/slurmdbd\n"
        f"AccountingStorageHost=localhost\nAccountingStoragePort={dbd_port}\n"
        # The munge socket for slurmdbd connections (AuthInfo serves the others).
        f"AccountingStoragePass={root / 'munge' / 'munge.socket'}\n"
        "JobAcctGatherType=jobacct_gather/none\nJobCompType=jobcomp/none\n"
        "MpiDefault=none\n"
        f"{node_line.strip()} NodeAddr=127.0.0.1 State=UNKNOWN\n"
        f"PartitionName={PARTITION} Nodes={cluster.node} Default=YES MaxTime=INFINITE State=UP\n"
    )


def _daemon(
    cluster: SlurmCluster,
    name: str,
    command: list[str],
    env: dict[str, str] | None = None,
    user: str | None = None,
) -> None:
    log = open(cluster.root / f"{name}.out", "w")  # noqa: SIM115 (the daemon holds it)
    process = subprocess.Popen(
        command,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, **cluster.env, **(env or {})},  # SLURM_CONF: the janitor's mark
        user=user,
        preexec_fn=_die_with_parent,
        cwd=cluster.root,
    )
    log.close()
    cluster.daemons.append(process)


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _wait_for(ready, deadline: float, cluster: SlurmCluster, name: str) -> None:
    while not ready():
        dead = [d for d in cluster.daemons if d.poll() is not None]
        if dead or time.monotonic() > deadline:
            what = f"exited with {dead[0].returncode}" if dead else "not ready in time"
            logs = sorted(cluster.root.glob("*.out")) + sorted(cluster.root.glob("log/*.log"))
            tails = "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-1500:]}" for p in logs)
            raise RuntimeError(f"test Slurm: {name} {what}\n{tails}")
        time.sleep(0.2)


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _sacctmgr_answers(cluster: SlurmCluster) -> bool:
    done = subprocess.run(
        ["sacctmgr", "-n", "-P", "show", "cluster"],
        env={**os.environ, **cluster.env},
        capture_output=True,
        timeout=60,
    )
    return done.returncode == 0


def _node_idle(cluster: SlurmCluster) -> bool:
    state = cluster.command("sinfo", "-h", "-o", "%T", check=False).strip()
    return state == "idle"


@contextlib.contextmanager
def running() -> Iterator[SlurmCluster]:
    """A cluster for the duration of the `with` block, its folder removed after."""
    cluster = start()
    try:
        yield cluster
    finally:
        cluster.stop()


def _stop_on_signal(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    # A shell's background job starts with SIGINT ignored: Ctrl-C and `kill` both stop it.
    signal.signal(signal.SIGINT, _stop_on_signal)
    signal.signal(signal.SIGTERM, _stop_on_signal)
    with running() as up:
        print(f"export SLURM_CONF={up.conf}  # node {up.node}, {up.cpus} CPUs; Ctrl-C stops it")
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()
