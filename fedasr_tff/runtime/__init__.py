"""Process-level helpers for running TFF simulations."""
