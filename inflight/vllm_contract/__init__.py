"""vLLM's real metric contract: the metrics a pinned vLLM release registers, read from its wheel.

``python -m inflight.vllm_contract refresh --version X`` (or ``make vllm-contract VLLM=X``)
downloads the release wheel, reads its source statically (:mod:`.static`; vLLM is never
imported) and writes ``inflight/emulator/vllm_metrics.json`` (:mod:`.contract`). The unit test
``tests/unit/test_vllm_contract.py`` holds the emulator and ``inflight.names`` to that file.
"""
