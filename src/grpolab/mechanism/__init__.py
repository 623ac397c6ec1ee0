"""Why an estimator helped or hurt: format breakage, per-token probability shifts, pass@k and the update's
geometry, read from the runs of one ``grpolab compare`` output (``grpolab mechanism OUT``).

Paper 1 (arXiv 2605.07689, eq. 8) shows that in an all-wrong group the sign advantage A = 2r - 1 gives every
completion A = -1, so its expected update is full-strength descent on the failure probability q^G ("pass@G
failure descent"). Per sample that update is -grad log pi(y) for each wrong completion y: it pushes down
*every* token of y, the answer format included, as negative-sample reinforcement (NSR) does; a group-centred
estimator (dr_grpo, grpo) gives the same group zero advantage and leaves those tokens alone. If that push
breaks the format the verifier reads, sign can lose accuracy on a model that starts mostly wrong. This
package measures the pieces of that story for each estimator of a comparison:

1. **Format breakage**: the share of completions the verifier could not score, start vs end (``eval.jsonl``'s
   ``unscorable``, where recorded), and, on completions sampled again from each run's final model, the share
   with no explicit answer form (``#### N``, ``\\boxed{N}``, "the answer is N"; gsm8k verifiers) and with no
   number at all. The gsm8k verifier returns None only for an unparseable reference (a completion without a
   number scores 0), so on gsm8k-scored tasks ``unscorable`` stays 0 and the answer-form share is the one
   that shows a broken format.
2. **Per-token shifts**: one fixed set of completions is drawn from the *start* policy (seeded; the first
   ``prompts`` test prompts x ``samples``), split into correct and wrong; each run's final model scores the
   same tokens. Reported: the token-mean change of log p and of p, separately for content tokens (an ASCII
   digit in the token) and format tokens (all others, EOS included; ``token_classes``), for correct and for
   wrong completions, averaged over seeds with a 95% Student-t CI (``grpolab.stats.t_interval``).
3. **pass@k before and after** (``eval.jsonl``): pass@1 up with pass@k_max flat or down reads as search
   compression (the paper's own reading of sign's gain), pass@k_max up as capacity gain.
4. **The update's geometry** (``updates``, from the runs' checkpoints): is an estimator slow or stuck? The
   variance view (``grpolab.diagnostics.variance``) says sign's update has the same expected direction as
   dr_grpo's but a lower signal-to-noise ratio; measured here are the cosine between successive updates and
   between seeds' total updates, the update norms, and Adam's ‖m̂‖/‖√v̂‖ against its value for pure noise.

Departures and choices: log-probabilities are taken at the runs' sampling temperature (the policy the
trainer optimises); the shifts are measured on start-policy samples only (what the policy did at the start,
not what it does at the end); unscorable completions count as wrong, as in ``grpolab.evaluation``.
"""

from grpolab.mechanism.analysis import COLUMNS, Options, measure_runs
from grpolab.mechanism.summary import passk_reading, summarise
from grpolab.mechanism.token_classes import content_mask, is_content_text

__all__ = ["COLUMNS", "Options", "content_mask", "is_content_text", "measure_runs", "passk_reading", "summarise"]
