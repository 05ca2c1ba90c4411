"""A vLLM-compatible replica for machines without a GPU: ``inflight emulator``.

OpenAI endpoints, ``max-num-seqs`` slots with an FCFS waiting queue, a step-clock
model of continuous batching, vLLM's metric names, start-up delay and a cold-start
penalty, every duration multiplied by ``--time-scale``.
"""
