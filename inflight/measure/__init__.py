"""What was measured: records, statistics, SLOs, verdicts, result files, tables and plots.

Shared by the live benchmark (``inflight.bench``) and the simulator (``inflight.sim``), so
a simulated run is judged and written exactly as a live one.
"""
