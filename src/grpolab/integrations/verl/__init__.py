"""verl adapter: grpolab's estimators as verl advantage estimators (``estimators``), verl's conventions for
them (``parity``), ``starvation/*`` metrics from a verl batch (``metrics``), and the ``verl.plugins`` entry
point that registers them on ``import verl`` (``plugin``).

This package imports nothing itself: ``plugin`` must be able to report, at WARNING level, a grpolab that
fails to import (verl logs plugin failures at DEBUG only), which it could not do if importing the package
already failed.
"""
