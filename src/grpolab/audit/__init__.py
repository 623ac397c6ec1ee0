"""``grpolab audit``: how much gradient starvation a finished training run suffered, from its rollout logs.

``audit(path, **options)`` returns a JSON-ready dict (per-run and per-step starvation rates, D_iid and the
Jensen gap, zero-gradient completions, pass@k, warnings). Modules, in the order data flows through them:

* ``sources``: finding the rollout tables (grpolab run directories, TRL completion logs, plain tables),
  choosing their columns, and streaming them in record batches.
* ``aggregate``: per-group partial sums, merged as they pile up, and the summary; the definitions and how
  they depart from the papers are in its docstring.
* ``render``: the rich terminal summary of a result, and its self-contained HTML report as ``Section``s
  rendered by ``grpolab.render`` (the renderer of the compare report and mechanism.md).
"""

from grpolab.audit.aggregate import GroupTable, audit, collect_groups, summarize

__all__ = ["GroupTable", "audit", "collect_groups", "summarize"]
