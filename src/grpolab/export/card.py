"""The model card (``README.md``) of an exported run: YAML front matter for the Hugging Face Hub, then what the
run was (base model, task, estimator, G, seed, lr, steps, grpolab version) and its evaluations from ``eval.jsonl``.

``base_model`` goes into the front matter only when the base is a Hub id (a name with one ``/`` that is no local
path, or the ``smollm2-135m`` preset): the embedded models ship inside grpolab and a local folder is on one
machine only, so the card names them in its text instead. A run does not record the grpolab version or commit that
trained it, so the card gives the version that exported it and says so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from grpolab import __version__
from grpolab.config import TrainConfig
from grpolab.export.source import RunSource
from grpolab.models import EMBEDDED, EMBEDDED_ARITH, SMOLLM2
from grpolab.provenance import describe

__all__ = ["TAGS", "hub_base_model", "model_card"]

TAGS = ("grpolab", "rlvr", "grpo")
_PRESET_HUB_IDS = {SMOLLM2: "HuggingFaceTB/SmolLM2-135M-Instruct"}  # the GGUF file's source model


def hub_base_model(model: str) -> str | None:
    """The Hub id of a run's ``--model``, or None for an embedded model or a local folder."""
    if model in _PRESET_HUB_IDS:
        return _PRESET_HUB_IDS[model]
    if model.count("/") == 1 and not model.startswith((".", "/")) and not Path(model).exists():
        return model
    return None


def _front_matter(source: RunSource) -> str:
    meta: dict[str, Any] = {"library_name": "transformers"}
    base = hub_base_model(source.config.model)
    if base is not None:
        meta["base_model"] = base
    meta["tags"] = list(TAGS)
    return "---\n" + yaml.safe_dump(meta, sort_keys=False) + "---\n"


def _base_text(model: str) -> str:
    if model in (EMBEDDED, EMBEDDED_ARITH):
        return (f"`{model}`, the tiny model (332k parameters, a character tokenizer) that ships inside grpolab "
                "(docs/embedded-model.md); it is not on the Hugging Face Hub")
    base = hub_base_model(model)
    return f"`{base}` (`{model}`)" if base and base != model else f"`{model}`"


def _settings_rows(source: RunSource) -> list[tuple[str, str]]:
    config = source.config
    lora = (f"r = {config.lora_r}, alpha = {config.lora_alpha}, merged into the base weights" if config.lora
            else "no: every weight was trained")
    of = f"{source.step} (checkpoint)" if source.checkpoint is not None else f"{source.step}"
    return [("base model", _base_text(config.model)), ("task", f"`{config.task}`"),
            ("verifier", f"`{config.verifier}`" if config.verifier else "the task's own"),
            ("estimator", f"`{config.advantage}`"), ("group size G", str(config.group_size)),
            ("seed", str(config.seed)), ("learning rate", f"{config.lr:g}"),
            ("steps", f"{of} of {config.steps}"), ("engine", config.engine), ("LoRA", lora),
            ("grpolab", _software_text(source.summary))]


def _software_text(summary: dict[str, Any] | None) -> str:
    """The grpolab version, commit and source digest that trained the run (``summary.json``'s ``"grpolab"``, in
    ``provenance.describe``'s words), or, for a run that predates the record or has not finished, the version that
    exported it, saying so."""
    recorded = (summary or {}).get("grpolab")
    if not isinstance(recorded, dict) or not recorded.get("version"):
        return f"not recorded by the run; exported with grpolab {__version__}"
    return f"{describe(recorded)} (trained the run)"


def _evaluation_rows(evaluations: list[dict[str, Any]], source: RunSource) -> list[dict[str, Any]]:
    """The start evaluation, the one at the exported checkpoint's step (if any), and the end evaluation."""
    start = next((row for row in evaluations if row.get("phase") == "start"), None)
    end = next((row for row in reversed(evaluations) if row.get("phase") == "end"), None)
    at_step = None
    if source.checkpoint is not None:
        at_step = next((row for row in evaluations if row.get("step") == source.step
                        and row.get("phase") in ("step", "end")), None)
    chosen = [start, at_step, end]
    return [row for i, row in enumerate(chosen) if row is not None and row not in chosen[:i]]


def _evaluation_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| phase | step | split | prompts | greedy accuracy | pass@1 | pass@n (n) |", "|---" * 7 + "|"]
    for row in rows:
        passk = row.get("pass_at_k") or {}
        top = max(passk, key=int) if passk else None
        lines.append(f"| {row.get('phase')} | {row.get('step')} | {row.get('split', 'test')} "
                     f"| {len(row.get('problem_ids') or []) or '?'} | {float(row['greedy_accuracy']):.4f} "
                     f"| {_number(passk.get('1'))} | {_number(passk.get(top))} ({top or '-'}) |")
    return lines


def _number(value: Any) -> str:
    return "-" if value is None else f"{float(value):.4f}"


def model_card(source: RunSource, evaluations: list[dict[str, Any]], folder_name: str, *,
               chat_template: bool) -> str:
    """The card's Markdown for ``source``, with ``evaluations`` (the run's ``eval.jsonl`` rows); ``chat_template``:
    whether the tokenizer written beside it has one."""
    config = source.config
    what = "its checkpoint of step" if source.checkpoint is not None else "its final model, after step"
    status = "" if source.finished else " The run had not finished when this checkpoint was exported."
    lines = [_front_matter(source), f"# {source.run_dir.name}", "",
             f"A policy trained with grpolab by reinforcement learning from a verifiable, binary "
             f"reward: the run `{source.run_dir}`, {what} {source.step}.{status} Weights in safetensors (float32, as "
             "grpolab loads them), with the base model's tokenizer and generation config; "
             f"{_template_text(chat_template)}", "", "| setting | value |", "|---|---|"]
    lines += [f"| {name} | {value} |" for name, value in _settings_rows(source)]
    rows = _evaluation_rows(evaluations, source)
    lines += ["", "## Evaluation", ""]
    if rows:
        lines += ["grpolab's evaluation during the run (the run's `eval.jsonl`): greedy accuracy and the unbiased "
                  "pass@k over n samples per prompt, on held-out prompts of the task.", "", *_evaluation_table(rows)]
    else:
        lines.append("The run recorded no evaluation.")
    lines += ["", "The same greedy accuracy, from this folder:", "", "```bash",
              f"grpolab eval --model {folder_name} --task {config.task}{_eval_flags(config)}", "```", ""]
    return "\n".join(lines)


def _template_text(chat_template: bool) -> str:
    if chat_template:
        return "the tokenizer's chat template is in `chat_template.jinja` (grpolab's tasks choose whether to use it)."
    return "the base tokenizer has no chat template, so prompts are plain text, as the run gave them."


def _eval_flags(config: TrainConfig) -> str:
    """The ``grpolab eval`` flags that give the run's own evaluations: its task, data, verifier and sizes."""
    import json

    values = [("--data", config.data), ("--prompt-column", config.prompt_column),
              ("--reference-column", config.reference_column), ("--verifier", config.verifier),
              ("--task-options", f"'{json.dumps(config.task_options)}'" if config.task_options else None),
              ("--max-new-tokens", config.max_new_tokens), ("--limit", config.eval_limit),
              ("--n", config.eval_samples), ("--seed", config.seed),
              ("--temperature", config.temperature if config.temperature != 1.0 else None)]
    return "".join(f" {flag} {value}" for flag, value in values if value is not None)
