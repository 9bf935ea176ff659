"""One script per scientific question (run each as ``PYTHONPATH=$PWD python
experiments/NAME.py``); a package so that tests and other scripts import them by
name, ``from experiments import markov_cycle``, not by file path."""
