"""The TRL engine of ``grpolab train`` and ``grpolab compare`` (``engine: trl``): TRL 1.16's ``GRPOTrainer``
trains each run through grpolab's subclass, and grpolab keeps the task, verifier, estimator, evaluation and the
run directory. ``arguments`` maps every setting onto TRL or refuses it, ``recorder`` writes the logs as the run
goes, ``run`` is one run (``TRLRun``, set up by ``grpolab.train.engines``) inside the run shell both engines
share (``grpolab.train.shell``). Needs the ``trl`` extra.
"""
