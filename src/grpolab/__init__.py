"""grpolab: reinforcement learning from verifiable binary rewards on language models.

GRPO-family advantage estimators (``grpolab.advantages``), loss aggregation (``grpolab.losses``),
reward verifiers (``grpolab.verifiers``), tasks (``grpolab.tasks``), gradient-starvation diagnostics
(``grpolab.diagnostics``), a CPU-friendly trainer and multi-seed comparisons with reports.
"""

__version__ = "0.1.0"
