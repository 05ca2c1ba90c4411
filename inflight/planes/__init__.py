"""Control planes: the loops that drive :mod:`inflight.control`'s deciders, collaborators passed in.

The local KEDA + HPA loop (:mod:`inflight.planes.autoscaler`), KEDA's side of the external
scaler's gRPC protocol (:mod:`inflight.planes.scaler_client`) and the peers' control planes
(:mod:`inflight.planes.peers`, around the peers' deciders in :mod:`inflight.control.peers`).
The live stack gives them real clients and the wall clock; the simulator gives them its
own clients and virtual time. Nothing here starts a process.
"""
