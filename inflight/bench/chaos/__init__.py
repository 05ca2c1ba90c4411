"""``inflight bench chaos``: the fault run (faults, load, probes, accounting, report)."""
