"""The open-loop benchmark: the sender, one measured run, and ``bench compare --scenario``."""
