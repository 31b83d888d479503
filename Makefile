# The README's commands. `make setup` once per machine, then `make test`.
.PHONY: setup test demo pfl-venv

setup:
	bash tools/setup.sh

test:
	bash tools/test.sh

# The main job: seed model, federated training without and with DP, report (demo_output/).
demo:
	PATH="$(CURDIR)/.venv/bin:$$PATH" python -m experiments.recipe --synthetic_speakers=480 --rounds=30 --output_dir=demo_output

# .venv-pfl: apple's pfl 0.3.1 for benchmarks/vs_pfl.py, from benchmarks/pfl/requirements.lock.
pfl-venv:
	bash benchmarks/pfl/setup.sh
