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
* ``experiments``: multi-seed sweeps. ``report``, ``audit``, ``mechanism``: what the runs show.
* ``commands`` and ``cli``: the ``grpolab`` command line. ``integrations``: TRL and verl.
"""

__version__ = "0.1.0"
