"""``inflight bench router|emulator|scaler|soak|upstream-client``: one component at a time.

The reference benchmark (``inflight bench run|compare|chaos``) measures the whole stack;
these measure one part each, on this machine, and print figures (none asserts on speed):

* ``router.py`` – the router beside nginx and vllm-router (capacity, added latency,
  streaming, balance); ``ab.py`` – its ``--ab A B`` mode: two commits' routers side by
  side, rounds interleaved, ratios;
* ``instructions.py`` – the router's instructions a request under callgrind (no load can
  move them): the guard ``tests/integration/test_router_instructions.py`` and
  ``--ab --instructions``;
* ``soak.py`` – the router under clients that leave at random moments: nothing leaks;
* ``upstream_client.py`` – the router's two upstream clients side by side;
* ``emulator.py`` – the emulator's measured throughput against its model, and its CPU;
* ``scaler.py`` – GetMetrics latency against a real Prometheus.

Shared parts: ``procs.py`` (the processes a run starts, stopped by PID), ``proxies.py``
(the proxies ``router.py`` and ``ab.py`` start side by side), ``upstream.py``
(a lean synthetic upstream), ``nginx.py`` and ``wrk.py`` (Debian's nginx and wrk),
``load.py`` (the asyncio load generators). ``cli.py`` holds the flags.
"""
