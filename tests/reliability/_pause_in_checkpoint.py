"""``python _pause_in_checkpoint.py train ...``: the grpolab CLI, but the checkpoint of step
``GRPOLAB_TEST_PAUSE_STEP`` stops for good right after it has written ``GRPOLAB_TEST_PAUSE_FILE``
(weights or optimizer): it writes ``GRPOLAB_TEST_MARKER`` and sleeps, so that a test can kill -9 it
inside ``save_checkpoint``. Without those variables it is the plain CLI.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import grpolab.train.checkpoint
import grpolab.train.trainer
from grpolab.cli import main

PAUSE_STEP = int(os.environ.get("GRPOLAB_TEST_PAUSE_STEP", "-1"))
PAUSE_FILE = os.environ.get("GRPOLAB_TEST_PAUSE_FILE", "weights")
MARKER = os.environ.get("GRPOLAB_TEST_MARKER", "")
_current = {"step": -1}
_real_save_file = grpolab.train.checkpoint.save_file
_real_save_checkpoint = grpolab.train.trainer.save_checkpoint


def _save_checkpoint(run_dir, step, *args, **kwargs):
    _current["step"] = step
    return _real_save_checkpoint(run_dir, step, *args, **kwargs)


def _save_file(tensors, filename, *args, **kwargs):
    _real_save_file(tensors, filename, *args, **kwargs)
    if _current["step"] == PAUSE_STEP and Path(filename).name.startswith(PAUSE_FILE):
        Path(MARKER).write_text(str(filename))
        time.sleep(600)  # killed here


grpolab.train.trainer.save_checkpoint = _save_checkpoint
grpolab.train.checkpoint.save_file = _save_file

if __name__ == "__main__":
    sys.exit(main())
