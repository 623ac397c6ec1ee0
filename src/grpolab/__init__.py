"""grpolab: reinforcement learning from verifiable binary rewards on language models.

The layout, from the pure core outwards (no module imports one further out, and the import graph has no
circles: ``tests/test_architecture.py``):

* ``diagnostics``: starvation metrics, pass@k, spectra; pure functions of arrays. ``stats``: multi-seed
  statistics.
* ``advantages`` (the estimator registry), ``losses``, ``process_rewards``: the objective.
* ``verifiers``, ``tasks``, ``rewards``: prompts, answers and scoring.
* ``config``: the one schema of a run and of a sweep, its checks and files.
* ``models``, ``hub``: loading a policy. ``engine``: sampling and forward passes.
* ``train``: one run (loop, step, checkpoints, logs). ``evaluation``: held-out accuracy and pass@k.
  ``gradients``: per-completion gradients and their geometry.
* ``sweep``: multi-seed comparisons, ``grpolab.compare(CompareConfig, TrainConfig, out)``. ``report``,
  ``audit``, ``mechanism``: what the runs show. ``export``: a run as a Hugging Face model folder with a card.
* ``commands`` and ``cli``: the ``grpolab`` command line. ``integrations``: TRL and verl.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "compare"]


def __getattr__(name: str):
    """``grpolab.compare`` loads the sweep package on first use, so that ``import grpolab`` stays light."""
    if name == "compare":
        from grpolab.sweep import compare

        return compare
    raise AttributeError(f"module 'grpolab' has no attribute {name!r}")
