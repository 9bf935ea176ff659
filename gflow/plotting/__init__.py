"""Figures of runs; the only package that imports matplotlib."""
