# The README's two commands. Both set everything up first (scripts/setup.sh).
.PHONY: up test
up:
	scripts/up.sh $(ARGS)
test:
	scripts/test.sh $(ARGS)
