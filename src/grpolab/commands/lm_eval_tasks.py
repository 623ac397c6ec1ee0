"""``grpolab lm-eval-tasks --out DIR``: write a grpolab task's test split as an lm-eval 0.4 task YAML and its data
(``grpolab.integrations.lm_eval.tasks``), so that ``lm_eval --include_path DIR --tasks grpolab_<task>`` runs it
offline with ``repeats: n`` and the task's generation settings. The task flags are ``grpolab eval``'s; run the
command once per task into the same DIR to put several tasks there."""

from __future__ import annotations

import argparse

from grpolab.commands.evaluate import EVAL_ALIASES, EVAL_TRAIN_DEFAULTS
from grpolab.commands.flags import add_config_arguments, config_from_args
from grpolab.config import TrainConfig
from grpolab.progress import results_console as console

# The TrainConfig fields that shape the task file, as `grpolab eval` names them (--n is lm-eval's repeats).
TASK_FIELDS = ("task", "data", "prompt_column", "reference_column", "task_options", "verifier", "seed",
               "temperature", "max_new_tokens", "eval_samples", "eval_limit")


def _rescored_alike(name: str, verifier: str) -> bool:
    """Whether ``grpolab eval --from-samples`` picks ``verifier`` for lm-eval's task ``name`` on its own."""
    from grpolab.errors import UserError
    from grpolab.harness_samples import verifier_for

    try:
        return verifier_for(name) == verifier
    except UserError:
        return False


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="the folder for the task YAML and its jsonl data (lm-eval's "
                                                     "--include_path); other files in it are left alone")
    add_config_arguments(parser, TrainConfig, defaults=EVAL_TRAIN_DEFAULTS, only=TASK_FIELDS, aliases=EVAL_ALIASES)


def run(args: argparse.Namespace) -> int:
    from grpolab.integrations.lm_eval.tasks import GenerationSettings, write_task
    from grpolab.train.lifecycle import load_task_for

    greedy = getattr(args, "temperature", None) == 0  # the task's greedy recipe: do_sample false
    if greedy:
        args.temperature = None  # a training run samples at a temperature > 0, which TrainConfig checks
    config: TrainConfig = config_from_args(args, TrainConfig, file_values=EVAL_TRAIN_DEFAULTS)
    task = load_task_for(config, for_model=False)  # no model here: lm-eval's --model_args names it
    settings = GenerationSettings(repeats=config.eval_samples, temperature=0.0 if greedy else config.temperature,
                                  max_new_tokens=config.max_new_tokens or task.max_new_tokens)
    written = write_task(task, args.out, settings, limit=config.eval_limit, verifier=config.verifier)
    verifier = "" if _rescored_alike(written.name, task.verifier) else f" --verifier {task.verifier}"
    lines = (f"{written.name}: {written.documents} documents x {settings.repeats} repeats, temperature "
             f"{settings.temperature:g}, at most {settings.max_new_tokens} new tokens",
             f"wrote {written.yaml_path} and {written.data_path}",
             f"run: python -m grpolab.integrations.lm_eval --model grpolab --model_args pretrained=MODEL "
             f"--include_path {args.out} --tasks {written.name} --log_samples --output_path OUT",
             f"then: grpolab eval --from-samples OUT{verifier}")
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return 0
