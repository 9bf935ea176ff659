"""``gflow train``: the attention model or a Transformer trained with optax on
minibatches, or by GD, an optimizer or the flow on a fixed loss, on Markov sequences,
in-context Markov chains or text; one run or a sweep over seeds and step sizes,
resumable, over several processes."""

from gflow.runs.train.config import TrainConfig as TrainConfig
from gflow.runs.train.config import TrainRun as TrainRun
from gflow.runs.train.config import TrainSweep as TrainSweep
from gflow.runs.train.config import LATER_SETTINGS as LATER_SETTINGS
from gflow.runs.train.job import TrainJob as TrainJob
from gflow.runs.train.job import gather as gather
from gflow.runs.train.run import TrainData as TrainData
from gflow.runs.train.run import init_model as init_model
from gflow.runs.train.run import prepare as prepare
from gflow.runs.train.run import run_train as run_train
from gflow.runs.strategies import train_strategies as train_strategies

__all__ = [
    "LATER_SETTINGS",
    "TrainConfig",
    "TrainData",
    "TrainJob",
    "TrainRun",
    "TrainSweep",
    "gather",
    "init_model",
    "prepare",
    "run_train",
    "train_strategies",
]
