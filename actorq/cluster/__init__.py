"""`actorq cluster`: the same services as compose, started through the Docker SDK.

`specs` turns a ClusterConfig into container specs (a pure function, unit tested);
`docker_backend` hands them to a Docker engine; `cli` wires both to the command line.
"""

from actorq.cluster.specs import ClusterConfig, ClusterPlan, ContainerSpec, plan_cluster

__all__ = ["ClusterConfig", "ClusterPlan", "ContainerSpec", "plan_cluster"]
