"""The fault run's fault lists, importable without aiohttp (the CLI's help uses them)."""

DEFAULT_FAULTS = (
    "kill-replica,hang-replica,prometheus-down,scaler-restart,second-router,"
    "router-crashloop,router-stop,router-restart,scale-down"
)
CI_FAULTS = "kill-replica,scaler-restart,scale-down"
