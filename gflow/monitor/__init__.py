"""The stage monitor for ordinary training loops (issue 15): per-head signals on a
probe batch, the streaming stage rules, and files written as training goes."""
