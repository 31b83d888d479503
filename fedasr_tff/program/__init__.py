"""The run layer shared by every task: resumable rounds, cohorts, privacy ledger, releases."""
