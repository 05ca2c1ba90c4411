"""The router: an OpenAI-compatible reverse proxy in front of vLLM replicas.

Least-outstanding dispatch, exact per-endpoint in-flight accounting (L is measured
here), SSE streaming pass-through, endpoint discovery (static list, file,
Kubernetes EndpointSlices) and Prometheus metrics. Served by ``inflight router``.
"""
