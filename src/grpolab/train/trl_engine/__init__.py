"""The TRL engine of ``grpolab train`` and ``grpolab compare`` (``engine: trl``): TRL 1.16's ``GRPOTrainer``
trains each run through grpolab's subclass, and grpolab keeps the task, verifier, estimator, evaluation and the
run directory. ``arguments`` maps every setting onto TRL or refuses it, ``recorder`` writes the logs as the run
goes, ``run`` is one run (``run_trl``, called by ``grpolab.train.train``). Needs the ``trl`` extra.
"""
