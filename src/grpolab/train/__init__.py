"""One training run: the loop (``trainer``), one step's batch and update (``step``), the run's set-up,
evaluations and finish (``lifecycle``), and what a run directory holds: checkpoints (``checkpoint``), logs
(``runlog``), its saved settings (``settings``) and its writer's lock (``lock``).

``from grpolab.train import train, Trainer`` is the Python API behind ``grpolab train``.
"""

from grpolab.train.lifecycle import RunResult
from grpolab.train.trainer import Trainer, train

__all__ = ["RunResult", "Trainer", "train"]
