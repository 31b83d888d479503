"""The federated program around training: metrics, reports."""

from fedasr_tff.program import report
