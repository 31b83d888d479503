"""The two sides of `benchmarks.vs_pfl`: `run_pfl` runs under .venv-pfl, `run_tff` under .venv."""
