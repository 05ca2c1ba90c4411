"""``inflight bench calibrate-emulator``: the emulator fitted to, and checked against, a real
engine (``cli.py`` the flags, ``real.py`` the measuring, ``model.py`` the pure fits and
replays, ``run.py`` the run)."""
