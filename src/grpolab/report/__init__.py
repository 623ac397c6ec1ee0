"""The report of ``grpolab compare``: the gradient-starvation paper's figures and tests, on your own runs.

``write_report(out_dir, results, metrics, config)`` writes ``report.html`` (one self-contained file: PNG
figures inlined as base64, inline CSS, no script, no external resource) and ``report.md`` (the same tables,
figures linked from ``figures/*.png``). ``summary_table(results)`` is the per (estimator, G) table the CLI
prints, ``summary_display`` its formatted form; ``screenshot(html, png)`` renders a report with headless
Chromium. Modules, in the order data flows through them:

* ``tables``: pure functions of the results and metrics frames (runs, summary, diverged runs, Jensen gap,
  equal cost, families); no plotting, no files.
* ``comparisons``: which pairs are tested and how (the primary pair alone, the secondary ones Holm-adjusted,
  the pairs that are one update under Adam, found by ``same_update``, named instead).
* ``figures``: matplotlib figures from those frames; the estimators' colours and order.
* ``verdict``, ``sections``, ``start``, ``curves``, ``selection``, ``families``, ``clipping``, ``data_section``,
  ``methods``: one function per report section, each returning a ``Section``; the verdict opens with
  ``bottom_line`` (one sentence per primary comparison) and ``forest`` (the plot of every tested difference,
  and the table of the pairs not tested).
* ``document``: the sections in order, and the two files (``build_sections``, ``write_report``).

The statistics and their measured coverage: docs/report-statistics.md.

The sections are rendered by ``grpolab.render`` (``Section`` -> HTML / Markdown, and the Chromium screenshot),
the one renderer that the audit page and mechanism.md use too.

How the numbers and figures depart from the paper (arXiv 2605.07689) is said in ``tables`` and ``figures``.
"""

from grpolab.render import screenshot
from grpolab.report.document import build_sections, write_report
from grpolab.report.sections import summary_display
from grpolab.report.tables import summary_table

__all__ = ["build_sections", "screenshot", "summary_display", "summary_table", "write_report"]
