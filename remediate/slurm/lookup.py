"""Which Slurm node a name from an alert is: a NodeName, a NodeHostName, or a fully qualified name's first label.

dcgm-exporter's `Hostname`/`hostname` is the host's name, often fully qualified (`gpu-01.cluster.example`);
the step metrics' `node` of a job under srun is Slurm's NodeName (SLURMD_NODENAME); an agent is named by its
host (or its `agent_node_name`). Slurm keeps both of a node's names (NodeName, NodeHostName), so each of these
spellings finds one node here, and the agent's lookup (remediate.executor.dispatch) tries the same names.
"""

from __future__ import annotations

from remediate.errors import ActionError
from remediate.slurm.errors import SlurmNodeNotFound
from remediate.slurm.model import SlurmNode
from remediate.slurm.nodecache import SlurmNodeCache


def spellings(name: str) -> tuple[str, ...]:
    """`name`, then its first label when it is fully qualified: the names one alert's value may stand for."""
    return tuple(dict.fromkeys([name, name.partition(".")[0]]))


def find_node(cache: SlurmNodeCache, name: str) -> SlurmNode | None:
    """The node `name` stands for, read fresh (`scontrol -o show node`: a decision is made on it); None when
    Slurm has no such NodeName, nor a node whose NodeHostName it is (the cache's map, read only then, so the
    common case costs one command), for `name` or its first label. Other errors propagate."""
    for spelling in spellings(name):
        try:
            return cache.client.node(spelling)
        except SlurmNodeNotFound:
            pass
        host_of = cache.name_of_host(spelling)
        if host_of is not None:
            try:
                return cache.client.node(host_of)
            except SlurmNodeNotFound:
                pass
    return None


def names_of(cache: SlurmNodeCache, name: str, *, wait: float = 1.0) -> tuple[str, ...]:
    """The NodeName and NodeHostName of the node `name` stands for, from the cache's view (names rarely change,
    and nothing is decided on them alone); () when no node has it or the view cannot be had within `wait`
    (Slurm away: the name is then used as it is)."""
    try:
        view = cache.nodes(wait=wait)
        by_host = {node.hostname: node for node in view.values()}
    except ActionError:
        return ()
    for spelling in spellings(name):
        node = view.get(spelling) or by_host.get(spelling)
        if node is not None:
            return tuple(dict.fromkeys([node.name, node.hostname]))
    return ()
