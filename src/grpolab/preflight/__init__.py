"""The pre-flight: before any training, what a model's per-prompt pass rates on the train prompts predict about
gradient starvation (the degenerate share per G and the Jensen gap of the gradient-starvation paper, arXiv
2605.07689; the variance view's SNR² ratios), which G and pass-rate band to train with, and the band's data.

Modules: ``predict`` (pure: counts -> the per-G table, the rules), ``pipeline`` (``preflight()``: sample,
predict, write), ``result`` (``PreflightResult``), ``outputs`` (counts.csv, the band and control data folders),
``page`` (the HTML page).
"""

from grpolab.preflight.pipeline import analyse, preflight
from grpolab.preflight.result import PreflightResult

__all__ = ["PreflightResult", "analyse", "preflight"]
