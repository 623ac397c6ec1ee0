"""The one table of the keys a training step writes to ``metrics.jsonl``: each key's meaning, unit and which
engines write it (and when), with the reason where only one engine does.

Both engines (``grpolab.train.trainer`` and ``grpolab.train.trl_engine``) write rows of these keys;
``tests/test_metric_keys.py`` runs both for two steps and fails on a key an engine writes that this table does
not know, or a key the table gives an engine at default settings that it did not write. ``docs/metrics.md`` is
rendered from this table (``render_markdown``) and a test keeps the two equal. To add a per-step metric, write
it in the engine(s) and add its row here; nothing else lists it.

Families whose keys are generated (``starvation/*`` from ``diagnostics.STARVATION_KEYS``, ``sampled/*``,
``grad/*``, ``trl/*``) appear as patterns ending in ``*``.

Where a key is shown is a field of its row too: ``label`` is its caption, ``dynamics`` makes it a panel of the
compare report's training-dynamics figure (``dynamics_keys``) and ``audit`` names the field of ``grpolab audit``'s
per-step rows that holds it, which makes it a column of the audit's per-step table (``audit_columns``). Neither
the report nor the audit lists keys of its own.

Words: a *uniform* group has rewards all equal (all correct, all wrong or nothing scorable; D_real); a
*degenerate* group has advantages all zero, as trained. Under a group-centred estimator and binary rewards the
two coincide; under ``sign`` (A = 2r - 1) no group is degenerate.

Renamed keys (``RENAMED``; ``upgrade_row`` maps an old row onto today's names, and ``runlog.read_metrics``
applies it, so logs written before a rename read as if written today):

* ``loss/policy`` -> ``loss/total``: grpolab's engine logged the minimised loss, policy term plus beta * KL, as
  ``loss/policy``; the TRL engine logged the same quantity as ``loss/total``.
* ``rollout/entropy`` of the TRL engine -> ``loss/entropy``: TRL's figure is the entropy of the trained tokens
  under the policy being updated (from the loss's forward pass); grpolab's ``rollout/entropy`` is the sampling
  distribution's entropy at rollout time. Only TRL-engine rows (they carry ``trl/entropy``) are upgraded.

This module imports nothing from grpolab, so that any layer (the engines, the run log, the report, the audit)
may read it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

from grpolab.capabilities import ENGINES as _ENGINE_TABLE

__all__ = ["ALWAYS", "COMPUTE", "ENGINES", "GROUP_RANK", "KEYS", "RENAMED", "MetricKey", "audit_columns",
           "default_keys", "dynamics_keys", "known", "label", "lookup", "render_markdown", "trl_names", "unknown_keys",
           "upgrade_row"]

ENGINES = tuple(_ENGINE_TABLE)
"""The training engines (``TrainConfig.engine``)."""

ALWAYS = ""
"""The condition of a key written at every step at default settings."""

GROUP_RANK = "grad/weighted_group_effective_rank"
"""The gradient effective rank the compare report plots (one of the ``grad/*`` family that
``grpolab.gradients.geometry`` writes): of each group's [G, D] matrix of A_i g_i, mean over the groups, the matrix
where the foundations paper's "effective rank about 2" is in question (docs/gradient-geometry.md)."""


@dataclass(frozen=True)
class MetricKey:
    """One row of the table.

    name: the key, or a family's pattern ending in ``*`` (``fnmatch``).
    unit: what its number counts ("share" is a fraction in [0, 1]; "count", "s", "nats/token", ...).
    meaning: what the number is, in one sentence.
    engines: engine -> when it writes the key (``ALWAYS``, or the setting that turns it on). An engine that is
        absent never writes it.
    reason: why an engine never writes it; required when one engine is absent.
    trl: TRL's logged names that the TRL engine records under this key (``trl_names``).
    label: its caption in figures and tables (the report's dynamics panels, the audit's per-step columns).
    dynamics: a panel of the compare report's training-dynamics figure, where the runs recorded it.
    hidden_by: a key whose panel shows the same figure: where the runs recorded that key, this one is not shown.
    audit: the field of ``grpolab audit``'s per-step rows that holds this figure, read from the rollout tables
        (a column of its per-step table); empty where the audit does not show it.
    """

    name: str
    unit: str
    meaning: str
    engines: Mapping[str, str] = field(default_factory=lambda: dict.fromkeys(ENGINES, ALWAYS))
    reason: str = ""
    trl: tuple[str, ...] = ()
    label: str = ""
    dynamics: bool = False
    hidden_by: str = ""
    audit: str = ""

    @property
    def pattern(self) -> bool:
        return self.name.endswith("*")

    def matches(self, key: str) -> bool:
        return fnmatchcase(key, self.name) if self.pattern else key == self.name


def _own(when: str = ALWAYS) -> dict[str, str]:
    return {"grpolab": when}


def _trl(when: str = ALWAYS) -> dict[str, str]:
    return {"trl": when}


_MIX_PARTS = "TRL's trainer computes the mixed advantages inside its step; grpolab's engine logs their parts"
_NO_TRL_SCORES = "TRL's reward functions return a float or None; they report no verifier errors or timeouts"
_OWN_UPDATE = "grpolab's update computes it; TRL's GRPOTrainer logs no such figure"
_OWN_OPTION = "a grpolab loss option; the TRL engine refuses or maps the option and TRL logs no such figure"
_NO_TRL_BACKWARD = ("TRL's GRPOTrainer does not report which rows and tokens reached its backward pass, so the TRL "
                    "engine leaves it unrecorded rather than assuming")

COMPUTE: dict[str, tuple[str, str]] = {
    "optimizer_steps": ("compute/optimizer_steps", "compute/optimizer_steps_total"),
    "trained_sequences": ("compute/trained_sequences", "compute/trained_sequences_total"),
    "trained_tokens": ("compute/trained_tokens", "compute/trained_tokens_total"),
    "forward_tokens": ("compute/forward_tokens", "compute/forward_tokens_total"),
    "sampled_tokens": ("compute/sampled_tokens", "rollout/tokens_generated"),
}
"""The compute counters (``grpolab.train.compute``): counter -> (its key per step, its cumulative key). The sampled
tokens' cumulative key is ``rollout/tokens_generated``, which counted them before the other counters existed."""

KEYS: tuple[MetricKey, ...] = (
    MetricKey("step", "step", "the training step, 1-based (one rollout batch and its update)", label="Step",
              audit="step"),
    # rollout/*: the sampled batch
    MetricKey("rollout/reward_mean", "reward", "mean reward of the batch's scorable completions", label="Mean reward",
              dynamics=True),
    MetricKey("rollout/accuracy", "share", "share of the batch's scorable completions with reward >= 0.5",
              label="Accuracy", dynamics=True, hidden_by="rollout/reward_mean", audit="success_rate"),
    MetricKey("rollout/completion_length", "tokens", "mean completion length"),
    MetricKey("rollout/truncated", "share", "share of completions that hit max_new_tokens without ending",
              label="Truncated", audit="truncated"),
    MetricKey("rollout/groups", "count", "prompt groups (P) in the batch trained on"),
    MetricKey("rollout/completions_generated", "count", "completions sampled so far in the run (cumulative)"),
    MetricKey("rollout/tokens_generated", "tokens", "completion tokens sampled so far in the run (cumulative, extra "
              "dynamic-sampling rounds included)", _own(),
              "TRL samples inside its step and the TRL engine keeps no token count across its checkpoints"),
    MetricKey("rollout/unscorable", "count", "completions of the step the verifier could not score (reward NaN)"),
    MetricKey("rollout/entropy", "nats/token", "mean per-token entropy of the sampling distribution over the "
              "completion tokens, at rollout time", _own(),
              reason="TRL's generation returns no per-token sampling entropy (its trained tokens' entropy is "
                     "loss/entropy)"),
    MetricKey("rollout/verifier_errors", "count", "completions whose verifier raised", _own(), _NO_TRL_SCORES),
    MetricKey("rollout/verifier_timeouts", "count", "completions whose verifier timed out", _own(), _NO_TRL_SCORES),
    MetricKey("rollout/prompts_truncated", "count", "prompts cut to fit the context window", _own(),
              "TRL truncates prompts itself (max_prompt_length) and does not count them"),
    MetricKey("rollout/sampler_kl", "nats/token", "mean per-token KL(sampler || trainer), k3 estimator, over the "
              "trained completion tokens", _own("a completion is trained"),
              "TRL's sampler and trainer are one model in one precision here; TRL logs no such figure"),
    MetricKey("rollout/dynamic_rounds", "count", "extra sampling rounds of DAPO's dynamic sampling",
              _own("dynamic_sampling"), "the TRL engine refuses dynamic_sampling"),
    MetricKey("rollout/curriculum_replaced", "count", "prompts of the step the difficulty curriculum replaced "
              "(their recent groups were all wrong or all right)", _own("curriculum"),
              "the TRL engine refuses curriculum"),
    MetricKey("rollout/replayed_groups", "count", "uniform groups of the step replaced by stored informative "
              "groups of earlier steps", _own("replay"), "the TRL engine refuses replay"),
    MetricKey("rollout/replay_age", "steps", "mean age of the replayed groups (0 when none)", _own("replay"),
              "the TRL engine refuses replay"),
    MetricKey("rollout/overlong_penalty", "reward", "mean overlong penalty of the batch's completions",
              _own("overlong_buffer"), _OWN_OPTION),
    # starvation/*: degeneracy of the batch's groups (grpolab.diagnostics.starvation_metrics)
    MetricKey("starvation/groups", "count", "groups in the batch", label="Groups", audit="groups"),
    MetricKey("starvation/all_correct", "share", "share of groups whose every completion is correct",
              label="All-correct groups"),
    MetricKey("starvation/all_wrong", "share", "share of groups whose every completion is wrong",
              label="All-wrong groups", dynamics=True),
    MetricKey("starvation/unscorable_groups", "share", "share of groups with no scorable completion"),
    MetricKey("starvation/uniform", "share", "share of uniform groups (rewards all equal): all_correct + all_wrong "
              "+ unscorable_groups (D_real)", label="Uniform groups (D_real)", audit="uniform"),
    MetricKey("starvation/degenerate", "share", "share of degenerate groups (advantages all zero, as trained)",
              label="Degenerate groups", dynamics=True, audit="degenerate"),
    MetricKey("starvation/p_mean", "share", "mean per-prompt success rate of the batch"),
    MetricKey("starvation/window_groups", "count", "groups in the success window behind d_iid"),
    MetricKey("starvation/d_iid", "share", "degeneracy expected from the window's mean success rate, (1-p)^G + p^G",
              label="D_iid", audit="d_iid"),
    MetricKey("starvation/jensen_gap", "share", "uniform - d_iid"),
    MetricKey("starvation/useful_fraction", "share", "share of completions with a non-zero advantage"),
    MetricKey("starvation/scorable_fraction", "share", "share of completions the verifier scored"),
    MetricKey("starvation/useful_token_fraction", "share", "share of completion tokens with a non-zero advantage"),
    MetricKey("sampled/*", "as starvation/*", "starvation/* of every group sampled, before dynamic sampling's "
              "filter", _own("dynamic_sampling"), "the TRL engine refuses dynamic_sampling"),
    # loss/*: the update
    MetricKey("loss/total", "loss", "the minimised loss of the last iteration: policy term plus beta * KL, less the "
              "entropy bonus",
              trl=("loss",)),
    MetricKey("loss/kl", "nats/token", "mean per-token KL to the reference policy (k3)",
              {"grpolab": "beta > 0", "trl": "beta > 0"}, trl=("kl",)),
    MetricKey("loss/entropy", "nats/token", "mean entropy of the trained tokens under the policy being updated "
              "(the loss's forward pass; grpolab's update computes it only for the entropy bonus, its rollout/entropy "
              "is the sampling entropy)", {"grpolab": "entropy_coef > 0", "trl": ALWAYS}, trl=("entropy",)),
    MetricKey("loss/entropy_bonus", "loss", "entropy_coef times the trained tokens' entropy aggregated like the "
              "loss: what the entropy bonus subtracted from loss/total in the last iteration",
              _own("entropy_coef > 0"), "TRL logs the entropy and entropy_coef (trl/entropy_coef), not the bonus"),
    MetricKey("loss/clip_fraction", "share", "share of trained tokens whose ratio was clipped",
              trl=("clip_ratio/region_mean",)),
    MetricKey("loss/clip_fraction_low", "share", "share of trained tokens clipped by the lower bound",
              trl=("clip_ratio/low_mean",)),
    MetricKey("loss/clip_fraction_high", "share", "share of trained tokens clipped by the upper bound (cispo: "
              "the weight cap)", trl=("clip_ratio/high_mean", "cispo_clip_ratio")),
    MetricKey("loss/clip_fraction_dual", "share", "share of tokens whose loss the dual clip capped",
              _own("dual_clip_c"), _OWN_OPTION),
    MetricKey("loss/off_policy_masked", "share", "share of trained tokens whose policy term the off-policy sequence "
              "mask dropped (A < 0 and the completion's mean KL(sampler || policy) above the threshold)",
              _own("off_policy_mask_threshold"), "TRL 1.16 masks the same sequences but logs no such figure"),
    MetricKey("loss/masked_truncated", "share", "share of completion tokens masked because truncated",
              _own("mask_truncated_completions"), _OWN_OPTION),
    MetricKey("loss/is_weight_mean", "ratio", "mean truncated importance-sampling weight",
              _own("sampler_is_cap"), _OWN_OPTION),
    MetricKey("loss/is_weight_max", "ratio", "largest truncated importance-sampling weight",
              _own("sampler_is_cap"), _OWN_OPTION),
    MetricKey("loss/grad_norm", "norm", "global gradient norm before clipping", trl=("grad_norm",)),
    MetricKey("loss/lr", "lr", "learning rate of the step", trl=("learning_rate",)),
    MetricKey("loss/clipped", "0/1", "1 when the pre-clip gradient norm exceeded max_grad_norm", _own(),
              _OWN_UPDATE),
    MetricKey("loss/trained_sequences", "count", "completions forwarded in the update (zero-advantage rows are "
              "skipped when beta = 0)", _own(), "TRL forwards every completion"),
    MetricKey("loss/train_tokens", "tokens", "completion tokens in the loss", _own(), _OWN_UPDATE),
    MetricKey("loss/masked_groups", "count", "uniform groups (rewards all equal) left out of the update by group "
              "masking",
              _own("mask_degenerate_groups"), "the TRL engine refuses mask_degenerate_groups"),
    MetricKey("loss/mix_first", "advantage", "mean |L * A_first| over the scored completions of a mixed estimator "
              "mix-FIRST-SECOND-L (grpolab.advantages.mix)", _own("advantage mix-*"), _MIX_PARTS),
    MetricKey("loss/mix_second", "advantage", "mean |(1 - L) * A_second| over the scored completions of a mixed "
              "estimator", _own("advantage mix-*"), _MIX_PARTS),
    MetricKey("loss/mix_first_share", "share", "loss/mix_first / (loss/mix_first + loss/mix_second): the first "
              "part's share of the mixed advantages (absent when both are 0)", _own("advantage mix-*"), _MIX_PARTS),
    MetricKey("loss/variance_filtered_share", "share", "share of the step's groups the reward-variance filter left "
              "out of the update (their variance fell outside the top variance_filter_p share)",
              _own("variance_filter"), "the TRL engine refuses variance_filter"),
    # compute/*: what the step spent (grpolab.train.compute); each per step and, under *_total, since the run began
    MetricKey("compute/optimizer_steps", "count", "optimizer steps the training step took (num_iterations)"),
    MetricKey("compute/optimizer_steps_total", "count", "optimizer steps so far in the run (cumulative)"),
    MetricKey("compute/trained_sequences", "count", "completions that reached the backward pass, once per "
              "optimizer step (zero-advantage rows skipped at beta = 0 are not counted)", _own(), _NO_TRL_BACKWARD),
    MetricKey("compute/trained_sequences_total", "count", "compute/trained_sequences so far in the run (cumulative)",
              _own(), _NO_TRL_BACKWARD),
    MetricKey("compute/trained_tokens", "tokens", "completion tokens of the completions that reached the backward "
              "pass, once per optimizer step", _own(), _NO_TRL_BACKWARD),
    MetricKey("compute/trained_tokens_total", "tokens", "compute/trained_tokens so far in the run (cumulative; "
              "what --budget trained_tokens=N counts)", _own(), _NO_TRL_BACKWARD),
    MetricKey("compute/forward_tokens", "tokens", "prompt and completion tokens (padding aside) of the completions "
              "forwarded with a gradient, once per optimizer step; forwards without one (reference, old log-probs) "
              "are not counted", _own(), _NO_TRL_BACKWARD),
    MetricKey("compute/forward_tokens_total", "tokens", "compute/forward_tokens so far in the run (cumulative)",
              _own(), _NO_TRL_BACKWARD),
    MetricKey("compute/sampled_tokens", "tokens", "completion tokens the step sampled (extra dynamic-sampling rounds "
              "included; the cumulative count is rollout/tokens_generated)"),
    # perf/*: wall time
    MetricKey("perf/step_time", "s", "wall time of the step"),
    MetricKey("perf/rollout_time", "s", "wall time of sampling and scoring"),
    MetricKey("perf/update_time", "s", "wall time of the update (TRL engine: step time less rollout time)"),
    MetricKey("perf/rollout_tokens_per_s", "tokens/s", "completion tokens sampled per second of rollout time",
              _own(), "TRL's generation time includes its scoring; the TRL engine reports times only"),
    MetricKey("perf/train_tokens_per_s", "tokens/s", "loss tokens per second of update time", _own(),
              "TRL's GRPOTrainer does not expose its trained token count per step"),
    MetricKey("perf/sampler_graph", "0/1", "1 when the step's (first) rollout replayed the lean decoder's CUDA graph",
              _own(), "TRL samples with its own generate"),
    MetricKey("perf/sampler_fell_back", "0/1", "1 when the step's (first) rollout fell back from the sampler its "
              "device and model call for (a failed or empty CUDA graph capture; a model the lean decoder refuses); "
              "summary.json's sampler says why", _own(), "TRL samples with its own generate"),
    # families written only when enabled
    MetricKey("grad/half_batch_cosine", "cosine", "cosine between the policy gradients of two halves of the batch's "
              "prompt groups (grpolab.gradients.halves; SNR^2 of the batch ~ 2c/(1-c))",
              _own("grad_analysis_every"), "needs the per-half gradients of grpolab's update"),
    MetricKey("grad/*", "various", "gradient geometry of the batch (grpolab.gradients.geometry)",
              _own("grad_analysis_every"), "needs the per-row gradients of grpolab's update"),
    MetricKey("trl/*", "as TRL logs", "TRL's own logged figures, under TRL's names", _trl(),
              "TRL's logs, recorded beside grpolab's keys"),
)
"""Every key a step may write, exact keys first within each prefix, then families."""

RENAMED: dict[str, str] = {"loss/policy": "loss/total"}
"""Old key -> today's key, for every engine's rows (the TRL engine's ``rollout/entropy``: ``upgrade_row``)."""


def lookup(key: str) -> MetricKey | None:
    """The table's row for ``key``: its exact row, else the first family whose pattern matches it."""
    exact = {k.name: k for k in KEYS if not k.pattern}
    return exact.get(key) or next((k for k in KEYS if k.pattern and k.matches(key)), None)


def known(key: str) -> bool:
    return lookup(key) is not None


def unknown_keys(keys: Iterable[str], engine: str) -> list[str]:
    """The keys that ``engine`` wrote but the table does not give it (unknown, or given only to the other)."""
    return sorted(k for k in set(keys) if (row := lookup(k)) is None or engine not in row.engines)


def default_keys(engine: str) -> list[str]:
    """The exact keys the table says ``engine`` writes at every step at default settings."""
    return [k.name for k in KEYS if not k.pattern and k.engines.get(engine) == ALWAYS]


def label(key: str) -> str:
    """The caption of ``key`` in figures and tables: its row's ``label``, else the key itself."""
    row = lookup(key)
    return row.label if row is not None and row.label else key


def dynamics_keys(recorded: Iterable[str]) -> list[str]:
    """The panels of the training-dynamics figure, in table order, for runs that recorded the keys ``recorded``."""
    have = set(recorded)
    return [k.name for k in KEYS if k.dynamics and k.name in have and k.hidden_by not in have]


def audit_columns() -> list[MetricKey]:
    """The rows ``grpolab audit``'s per-step table shows (one column each, ``audit`` its field), in table order."""
    return [k for k in KEYS if k.audit]


def trl_names() -> dict[str, str]:
    """TRL's logged name -> the grpolab key the TRL engine records it under."""
    return {name: k.name for k in KEYS for name in k.trl}


def upgrade_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with renamed keys under today's names (a row that has both keeps today's value)."""
    if not any(old in row for old in RENAMED) and not ("trl/entropy" in row and "loss/entropy" not in row):
        return row
    out = dict(row)
    if "trl/entropy" in out and "loss/entropy" not in out and "rollout/entropy" in out:
        out["loss/entropy"] = out.pop("rollout/entropy")  # the TRL engine's trained-token entropy, before it moved
    for old, new in RENAMED.items():
        if old in out:
            value = out.pop(old)
            out.setdefault(new, value)
    return out


def render_markdown() -> str:
    """The table as Markdown (``docs/metrics.md`` holds it verbatim)."""
    lines = ["| key | unit | meaning | grpolab | trl |", "|---|---|---|---|---|"]
    for k in KEYS:
        cells = [_cell(k, engine) for engine in ENGINES]
        lines.append(f"| `{k.name}` | {k.unit} | {k.meaning} | {cells[0]} | {cells[1]} |")
    lines += ["", "Why an engine does not write a key:", ""]
    lines += [f"- `{k.name}` ({', '.join(k.engines)} only): {k.reason}" for k in KEYS if k.reason]
    lines += ["", "Renamed keys (old logs read under the new name):", "",
              *[f"- `{old}` -> `{new}`" for old, new in RENAMED.items()],
              "- `rollout/entropy` of TRL-engine rows (trained-token entropy) -> `loss/entropy`"]
    return "\n".join(lines) + "\n"


def _cell(key: MetricKey, engine: str) -> str:
    if engine not in key.engines:
        return "-"
    return "yes" if key.engines[engine] == ALWAYS else f"with `{key.engines[engine]}`"
