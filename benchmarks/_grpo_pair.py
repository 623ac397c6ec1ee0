"""grpolab's ``Trainer.step`` and TRL's ``GRPOTrainer`` step on the same model, prompts, reward and settings.

Both sides live in one process and run one thread. They are timed in interleaved blocks: a block of
grpolab steps, then a block of TRL steps (one ``trainer.train()`` call with ``max_steps`` = block
size, step times recorded by a callback from ``on_step_begin`` to ``on_step_end``, so TRL's own loop
is what is timed), repeated. The first step of every block is a warm-up and is dropped; the result is
the ratio of the medians of the remaining steps.

Same settings on both sides: P prompts x G completions per step (TRL: ``per_device_train_batch_size``
= P * G, ``num_generations`` = G, one generation per step), ``max_new_tokens``, temperature 1, top-p 1,
beta = 0 (no reference model), the group-normalised advantage (grpolab ``grpo`` = TRL's default
``scale_rewards="group"``), token-mean loss (TRL ``loss_type="dapo"``), AdamW with the same constant
lr and betas, gradient clipping at 1, no evaluation, no logging, no checkpoints. The task is ``arith``
with the setting's ``task_options`` and the reward its ``verifier`` (default ``exact``) on both sides;
a task in the chat template goes to TRL as conversational prompts, which TRL wraps in the same
template. The lr is small on purpose: the policy barely moves, so completion lengths stay comparable
across the run. ``grpolab_dtype`` and ``trl_bf16`` set each side's precision (grpolab: autocast of the
update, its sampler is the lean bfloat16 decoder for Llama models; TRL: ``bf16=True``, autocast).

Difference that is grpolab's by design (module docstring of ``grpolab.train.trainer``): completions with
advantage exactly 0 are not forwarded in the update; ``trained_fraction`` reports how many were.
"""

from __future__ import annotations

import copy
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from transformers import TrainerCallback
from transformers.trainer_callback import PrinterCallback

from _common import median, one_thread

TRL_DEFAULT_BETAS = (0.9, 0.99)  # grpolab's default AdamW betas, given to TRL too


@dataclass(frozen=True)
class PairSettings:
    """One side-by-side setting. P prompts, G completions each, T = max_new_tokens."""

    model: str
    prompts: int = 8
    group_size: int = 4
    max_new_tokens: int = 16
    lr: float = 1e-6
    lora: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    task_options: dict[str, Any] = field(default_factory=dict)
    verifier: str = "exact"
    temperature: float = 1.0
    micro_batch_size: int = 64
    grpolab_dtype: str = "float32"
    trl_bf16: bool = False
    trl_bf16_weights: bool = False
    """TRL's copy of the model in bfloat16 (what TRL users load on a GPU), not the loaded float32."""
    device: str = "cpu"
    """Where both sides run (grpolab's ``device`` setting; TRL's ``use_cpu`` unless "cpu")."""


@dataclass
class PairTimes:
    """Per-step wall times (s) after warm-up, and where the time went."""

    grpolab: list[float]
    trl: list[float]
    grpolab_rollout: list[float]
    trl_generate: list[float]
    grpolab_tokens: list[float]
    trained_fraction: list[float]
    grpolab_rewards: list[float] = field(default_factory=list)
    grpolab_update: list[float] = field(default_factory=list)
    trl_weights: str = ""
    """The dtype of TRL's model's input embedding, as it trained ("torch.bfloat16", ...)."""

    @property
    def trl_update(self) -> list[float]:
        """TRL's update alone: each step's time less its generation and scoring (``_time_generation``)."""
        return [step - generate for step, generate in zip(self.trl, self.trl_generate, strict=True)]

    @property
    def ratio(self) -> float:
        return median(self.grpolab) / median(self.trl)


def verifier_reward(verifier: str) -> Any:
    """A TRL reward function scoring with grpolab's verifier ``verifier`` (None when unscorable)."""
    from grpolab.verifiers import score

    def reward(completions: list[Any], reference: list[str], **_: Any) -> list[float | None]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]  # conversational or plain
        return [score(verifier, c, r) for c, r in zip(texts, reference, strict=True)]

    reward.__name__ = f"{verifier}_reward"
    return reward


def _grpolab_config(settings: PairSettings) -> Any:
    from grpolab.config import TrainConfig

    return TrainConfig(
        model=settings.model, prompts_per_step=settings.prompts, group_size=settings.group_size,
        max_new_tokens=settings.max_new_tokens, lr=settings.lr, beta=0.0, advantage="grpo", threads=1,
        steps=100_000, eval_start=False, progress=False, checkpoint_every=0, lora=settings.lora,
        lora_r=settings.lora_r, lora_alpha=settings.lora_alpha, task="arith", task_options=settings.task_options,
        verifier=settings.verifier, temperature=settings.temperature, dtype=settings.grpolab_dtype,
        micro_batch_size=settings.micro_batch_size, device=settings.device,
    )


def _trl_config(settings: PairSettings, out_dir: str) -> Any:
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=out_dir, max_steps=1, per_device_train_batch_size=settings.prompts * settings.group_size,
        num_generations=settings.group_size, max_completion_length=settings.max_new_tokens,
        learning_rate=settings.lr, lr_scheduler_type="constant", adam_beta1=TRL_DEFAULT_BETAS[0],
        adam_beta2=TRL_DEFAULT_BETAS[1], weight_decay=0.0, max_grad_norm=1.0, beta=0.0, loss_type="dapo",
        temperature=settings.temperature, top_p=1.0, use_vllm=False, use_cpu=settings.device == "cpu",
        bf16=settings.trl_bf16, logging_strategy="no",
        save_strategy="no", eval_strategy="no", report_to=[], disable_tqdm=True, dataloader_pin_memory=False,
        seed=0,
    )


def _trl_lora(settings: PairSettings, model: Any) -> Any:
    from peft import LoraConfig

    from grpolab.config import TrainConfig

    wanted = TrainConfig().lora_targets.split(",")
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    return LoraConfig(r=settings.lora_r, lora_alpha=settings.lora_alpha, lora_dropout=0.0,
                      target_modules=[t for t in wanted if t in present], task_type="CAUSAL_LM")


class StepClock(TrainerCallback):
    """A TRL callback recording the wall time of every optimizer step (on a GPU up to the end of its queued work)."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []
        self._started = 0.0

    def on_step_begin(self, *args: Any, **kwargs: Any) -> None:
        self._started = time.perf_counter()

    def on_step_end(self, *args: Any, **kwargs: Any) -> None:
        import torch

        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.times.append(time.perf_counter() - self._started)


def _time_generation(trainer: Any, record: list[float]) -> None:
    """Wrap TRL's ``_generate_and_score_completions`` (sample + score) to record its wall time."""
    original = trainer._generate_and_score_completions

    def timed_generation(inputs: Any) -> Any:
        started = time.perf_counter()
        output = original(inputs)
        record.append(time.perf_counter() - started)
        return output

    trainer._generate_and_score_completions = timed_generation


def _clear_stale_quantized_flag(model: Any) -> None:
    """grpolab's GGUF loader (``models._load_from_pretrained``) drops ``hf_quantizer`` but leaves the
    instance flag ``is_quantized = True``, and HF ``Trainer`` then refuses to train the (already
    dequantised, float32) model; clear it on TRL's copy."""
    if getattr(model, "hf_quantizer", None) is None and model.__dict__.get("is_quantized"):
        model.is_quantized = False


class GrpoPair:
    """The two trainers, built on copies of one loaded policy."""

    def __init__(self, settings: PairSettings, work_dir: Path):
        from datasets import Dataset
        from trl import GRPOTrainer

        from grpolab.models import load_policy
        from grpolab.train.lifecycle import load_task_for
        from grpolab.train.trainer import Trainer

        one_thread()
        warnings.filterwarnings("ignore", category=FutureWarning)  # transformers' renames, on every train()
        policy = load_policy(settings.model)
        trl_model, trl_tokenizer = copy.deepcopy(policy.model), copy.deepcopy(policy.tokenizer)
        if settings.trl_bf16_weights:
            import torch

            trl_model = trl_model.to(torch.bfloat16)
        _clear_stale_quantized_flag(trl_model)
        config = _grpolab_config(settings)
        task = load_task_for(config)
        self.grpolab = Trainer(config, work_dir / "grpolab", policy=policy, task=task)
        prompts = [[{"role": "user", "content": p.prompt}] if task.use_chat_template else p.prompt for p in task.train]
        dataset = Dataset.from_dict({"prompt": prompts, "reference": [p.reference for p in task.train]})
        self.clock = StepClock()
        self.trl = GRPOTrainer(
            model=trl_model, processing_class=trl_tokenizer, reward_funcs=verifier_reward(settings.verifier),
            args=_trl_config(settings, str(work_dir / "trl")), train_dataset=dataset, callbacks=[self.clock],
            peft_config=_trl_lora(settings, trl_model) if settings.lora else None,
        )
        self.trl.remove_callback(PrinterCallback)  # with tqdm off, it prints the end-of-train() summary
        self.trl_generation: list[float] = []
        _time_generation(self.trl, self.trl_generation)
        self._step = 0

    def grpolab_block(self, steps: int) -> list[dict[str, Any]]:
        metrics = []
        for _ in range(steps):
            self._step += 1
            metrics.append(self.grpolab.step(self._step))
        return metrics

    def trl_block(self, steps: int) -> tuple[list[float], list[float]]:
        self.clock.times.clear()
        self.trl_generation.clear()
        self.trl.args.max_steps = steps
        self.trl.train()
        return list(self.clock.times), list(self.trl_generation)


def compare_steps(settings: PairSettings, *, blocks: int, steps_per_block: int) -> PairTimes:
    """Interleaved blocks of grpolab and TRL steps; the first step of each block is dropped."""
    times = PairTimes([], [], [], [], [], [])
    with tempfile.TemporaryDirectory(prefix="grpolab-bench-") as tmp:
        pair = GrpoPair(settings, Path(tmp))
        times.trl_weights = str(pair.trl.model.get_input_embeddings().weight.dtype)
        for _ in range(blocks):
            metrics = pair.grpolab_block(steps_per_block)[1:]
            times.grpolab += [m["perf/step_time"] for m in metrics]
            times.grpolab_rollout += [m["perf/rollout_time"] for m in metrics]
            times.grpolab_update += [m["perf/update_time"] for m in metrics]
            times.grpolab_tokens += [m["rollout/completion_length"] for m in metrics]
            times.grpolab_rewards += [m["rollout/reward_mean"] for m in metrics]
            times.trained_fraction += [m["loss/trained_sequences"] / (settings.prompts * settings.group_size)
                                       for m in metrics]
            trl_steps, trl_generation = pair.trl_block(steps_per_block)
            times.trl += trl_steps[1:]
            times.trl_generate += trl_generation[1:]
    return times


def describe(times: PairTimes) -> dict[str, Any]:
    """Medians (ms) of both sides and the share of each step spent sampling + scoring."""
    g, t = median(times.grpolab), median(times.trl)
    return {
        "grpolab_step_ms": round(1000 * g, 1),
        "trl_step_ms": round(1000 * t, 1),
        "grpolab_rollout_share": round(median(times.grpolab_rollout) / g, 3),
        "grpolab_update_ms": round(1000 * median(times.grpolab_update), 1) if times.grpolab_update else None,
        "trl_update_ms": round(1000 * median(times.trl_update), 1) if times.trl_generate else None,
        "trl_generate_share": round(median(times.trl_generate) / t, 3) if times.trl_generate else None,
        "mean_completion_tokens": round(float(np.mean(times.grpolab_tokens)), 2),
        "grpolab_trained_fraction": round(float(np.mean(times.trained_fraction)), 3),
        "grpolab_reward_mean": round(float(np.mean(times.grpolab_rewards)), 3),
        "steps_timed": len(times.grpolab),
    }
