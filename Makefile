# The README's commands. `make setup` once per machine, then `make test`.
.PHONY: setup test

setup:
	bash tools/setup.sh

test:
	bash tools/test.sh
