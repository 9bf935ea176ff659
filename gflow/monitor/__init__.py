"""The stage monitor for ordinary training loops (issue 15): per-head signals on a
probe batch, the streaming stage rules, and files written as training goes.

Public names: the ``Monitor``, the readers of the directory it writes, and
``probe_unigram_loss``, the reference of the stage rules' information gate (the
probe's own unigram loss, which ``unigram_gap`` is measured against).
"""

# The monitor
from gflow.monitor.monitor import Monitor as Monitor

# The framework-free reduction of attention probabilities
from gflow.monitor.reduce import AttentionSignals as AttentionSignals
from gflow.monitor.reduce import attention_signals as attention_signals
from gflow.monitor.probe import Probe as Probe

# The information gate's reference: the probe's own unigram loss
from gflow.monitor.signals import probe_unigram_loss as probe_unigram_loss

# Its files
from gflow.monitor.logs import load_monitor as load_monitor
from gflow.monitor.logs import read_rows as read_rows

__all__ = [
    "AttentionSignals",
    "Monitor",
    "Probe",
    "attention_signals",
    "load_monitor",
    "probe_unigram_loss",
    "read_rows",
]
