# The README's commands. `make setup` once per machine, then `make test`.
.PHONY: setup test demo

setup:
	bash tools/setup.sh

test:
	bash tools/test.sh

# The main job: seed model, federated training without and with DP, report (demo_output/).
demo:
	PATH="$(CURDIR)/.venv/bin:$$PATH" python -m experiments.demo --output_dir=demo_output
