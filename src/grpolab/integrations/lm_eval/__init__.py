"""grpolab inside lm-eval 0.4 (the optional extra ``lm_eval``; docs/evaluation.md).

Modules:

* ``tasks``: a grpolab task's test split as an lm-eval task YAML and its jsonl data (``grpolab lm-eval-tasks``);
  needs only PyYAML;
* ``backend``: the ``grpolab`` model backend (``--model grpolab``), sampling with grpolab's sampler; imports lm-eval;
* ``__main__``: ``python -m grpolab.integrations.lm_eval ARGS``, lm-eval's command line with the backend registered.

lm-eval scores only the first of ``repeats``; ``grpolab eval --from-samples`` re-scores all of them.
"""

from grpolab.integrations.lm_eval.tasks import GenerationSettings, WrittenTask, lm_eval_task_name, write_task

__all__ = ["GenerationSettings", "WrittenTask", "lm_eval_task_name", "write_task"]
