"""What to send: the workloads shared by the live benchmark and the simulator.

Open-loop arrivals, token-length distributions, named scenarios, request traces and their
file form, the flags that turn into one plan (:mod:`inflight.workload.plan`), and the
meeting-summary request of the closed-loop sweep (:mod:`inflight.workload.meeting`).
"""
