"""Read a harness's per-sample output back and re-score it with grpolab's verifiers (``grpolab eval
--from-samples``).

Modules:

* ``records``: ``HarnessSamples``, one task's documents, references and every response, as read from a file;
* ``files``: which files a path names (a file, or a directory searched for both kinds) and which reader reads each;
* ``lm_eval``: lm-eval's ``samples_<task>_<date>.jsonl`` (one line per document and filter);
* ``lighteval``: lighteval's ``details_<task>_<date>.parquet`` (one row per document);
* ``rescore``: the task's verifier, every response scored, the sampled metrics (``diagnostics.sampled``).

The harness's own metric values are never read: every response is scored again, so that all repeats count
(lm-eval scores only the first of ``repeats`` for generative tasks) and every harness is scored alike.
"""

from grpolab.harness_samples.files import find_sample_files, read_samples
from grpolab.harness_samples.records import HarnessSamples
from grpolab.harness_samples.rescore import TaskScore, rescore, verifier_for

__all__ = ["HarnessSamples", "TaskScore", "find_sample_files", "read_samples", "rescore", "verifier_for"]
