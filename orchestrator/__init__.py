"""The single-machine stack behind ``inflight up``.

A replica supervisor (process groups, free ports, health gating), a Prometheus
launcher, and a local KEDA+HPA loop that calls the scaler over gRPC as KEDA does.
"""
