"""One training run: the engine dispatch (``engines``), the run shell both engines share (``shell``: the run
directory, settings, task, logs, evaluations and end), grpolab's own engine (``trainer``, with one step's batch in
``batch`` and its update in ``step``), TRL's (``trl_engine``), the run's set-up pieces (``lifecycle``), and what a
run directory holds: checkpoints (``checkpoint``), logs (``runlog``), its saved settings (``settings``) and its
writer's lock (``lock``).

``from grpolab.train import train, Trainer`` is the Python API behind ``grpolab train``.
"""

from grpolab.train.engines import train
from grpolab.train.lifecycle import RunResult
from grpolab.train.trainer import Trainer

__all__ = ["RunResult", "Trainer", "train"]
