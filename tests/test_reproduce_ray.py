"""``spmlkit reproduce --backend ray --address``: a reproduction on a Ray cluster of two nodes started on
this machine gives the tables the same reproduction gives here (docs/reproductions.md, "On a cluster").

The cluster is bound to the loopback address only: every node is started with 127.0.0.1 as its address,
and Ray's own choice of this machine's address (its "reachable" one, used for a cluster's driver and
workers) is the loopback's too (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, the setting under which Ray
keeps to 127.0.0.1). A test checks, from ``/proc``, that no process of the cluster listens anywhere else.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from spmlkit.cli import main

ray = pytest.importorskip("ray")

#: a small reproduction: two methods of the fair grid (in groups of 16), two trials, a subset of yeast
ARGS = ["reproduce", "crisp-tabular", "--datasets", "yeast", "--methods", "an,wan", "--trials", "2", "--epochs", "2",
        "--subset", "240", "--quiet"]
_LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """Two Ray nodes of one CPU each on 127.0.0.1; yields the head's address."""
    from ray.cluster_utils import Cluster

    from ray._private import ray_constants

    before = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"), ray_constants.ENABLE_RAY_CLUSTER
    # this machine's address, to Ray, is 127.0.0.1: for the processes the nodes start (read when they import
    # Ray) and for this one, which imported Ray before (the driver resolves a cluster's 127.0.0.1 with it)
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    nodes = Cluster(initialize_head=True, connect=False,
                    head_node_args={"num_cpus": 1, "node_ip_address": "127.0.0.1", "include_dashboard": False})
    try:
        nodes.add_node(num_cpus=1, node_ip_address="127.0.0.1")
        nodes.wait_for_nodes()
        yield nodes.address
    finally:
        nodes.shutdown()
        if before[0] is None:
            os.environ.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
        else:
            os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = before[0]
        ray_constants.ENABLE_RAY_CLUSTER = before[1]


def _listening_addresses() -> set[str]:
    """The local addresses (hex, as /proc/net writes them) of every listening TCP socket of this
    process's descendants: the cluster's GCS, raylets, workers and agents."""
    me = os.getpid()
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    def descends(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == me:
                return True
        return False
    inodes = set()
    for pid in (p for p in parents if descends(p)):
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        inodes |= {link[8:-1] for link in links if link.startswith("socket:[")}
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                found.add(fields[1].split(":")[0])
    return found


@pytest.mark.skipif(not Path("/proc/net/tcp").is_file(), reason="reads sockets from /proc (Linux)")
def test_the_cluster_listens_on_the_loopback_address_only(cluster: str) -> None:
    assert cluster.startswith("127.0.0.1:")
    found = _listening_addresses()
    assert found and found <= _LOOPBACK, found


@pytest.mark.usefixtures("one_thread")
def test_a_reproduction_on_two_nodes_gives_the_tables_of_one_machine(tmp_path: Path, cluster: str, capsys) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    assert main([*ARGS, "--jobs", "2", "--out", str(here)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    assert main([*ARGS, "--backend", "ray", "--address", cluster, "--out", str(there)]) == 0, capsys.readouterr().err
    from spmlkit.experiments.store import ResultsStore

    runs = ResultsStore(there / "results.db").to_dataframe()
    assert len(runs) == 2 * 2 * 32 and (runs["status"] == "ok").all() and (runs["group_size"] == 16).all()
    assert sorted(runs["group_size"].unique().tolist()) == sorted(
        ResultsStore(here / "results.db").to_dataframe()["group_size"].unique().tolist())
    for name in ("crisp-tabular.md", "crisp-tabular.csv"):
        assert (there / name).read_text() == (here / name).read_text(), name
    text = (there / "crisp-tabular.md").read_text()
    assert "| AN | fair grid |" in text and "| WAN | fair grid |" in text
