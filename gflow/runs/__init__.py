"""Configured, saved and resumable runs: run directories, checkpoints, load_run and
the HTML report."""
