# The README's commands. up and test set everything up first (scripts/setup.sh); image
# builds the Dockerfile with podman (scripts/image.sh).
.PHONY: up test image
up:
	scripts/up.sh $(ARGS)
test:
	scripts/test.sh $(ARGS)
image:
	scripts/image.sh $(ARGS)
