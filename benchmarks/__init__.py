"""gflow benchmarks (issue 5): ``python -m benchmarks [--quick]``; see BENCHMARKS.md."""
