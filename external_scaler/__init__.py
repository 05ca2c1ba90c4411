"""The KEDA external scaler: gRPC ``externalscaler.ExternalScaler`` over a pure policy.

Reads L (requests in flight) from Prometheus with PromQL, or straight from the
routers' ``/metrics``, and returns a stabilized metric so that KEDA/HPA picks
``ceil(L / (slots x target saturation))`` replicas. Served by ``inflight scaler``.
"""
