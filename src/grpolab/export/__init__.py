"""Export a grpolab run as a Hugging Face model folder that any transformers user loads, with a card saying what
the run was (``grpolab export RUN --out DIR``).

``export`` takes a run directory (its ``final/`` model, or the checkpoint of ``step``) or a ``grpolab compare``
directory (its result runs, narrowed by ``arms`` and ``seeds``, one folder each, named by run id). A folder holds
the model with any LoRA adapter merged into the base weights (peft's ``merge_and_unload``), as safetensors in
float32 (the weights ``grpolab eval --model RUN`` evaluates, bit for bit), ``config.json``,
``generation_config.json`` (the base's, without its ``max_new_tokens``: the harness sets the budget), the base model's
tokenizer with its chat template, and ``README.md`` (``card``). Every
run is checked before any model loads (``source.read_run``: diverged, damaged and unfinished runs are refused in one
line naming the run), ``--out`` before anything is written (``folder.check_out``), and everything is written into a
temporary folder beside ``--out`` that is renamed into place only when complete (``folder.staged``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from grpolab.errors import UserError
from grpolab.export.card import model_card
from grpolab.export.folder import check_out, staged
from grpolab.export.source import RunSource, load_model, read_run
from grpolab.export.sweep import is_compare_dir, result_runs
from grpolab.train.runlog import read_evaluations

__all__ = ["Exported", "export", "write_model"]


@dataclass(frozen=True)
class Exported:
    """One exported run: the run directory, the step its weights are of, and the folder written."""

    run_dir: Path
    step: int
    folder: Path


def export(path: str | Path, out: str | Path, *, step: int | None = None, arms: Sequence[str] = (),
           seeds: Sequence[int] = (), overwrite: bool = False,
           on_run: Callable[[Exported], None] | None = None) -> list[Exported]:
    """Export the run (or the compare directory's result runs) at ``path`` into ``out``; returns what was written.
    ``on_run`` is called as each run's folder is written into the temporary folder."""
    path, out = Path(path), Path(out)
    compare = path.is_dir() and is_compare_dir(path)
    if not compare and (arms or seeds):
        raise UserError(f"--arm and --seed choose runs of a grpolab compare directory, and {path} is one run; "
                        "drop them")
    named = result_runs(path, arms=arms, seeds=seeds) if compare else [(path.name, path)]
    sources = [(name, read_run(run_dir, step)) for name, run_dir in named]  # every run checked before any loads
    if _inside(out, [source.run_dir for _, source in sources]):
        raise UserError(f"--out {out} is inside a run it exports; choose a folder outside the run")
    check_out(out, overwrite=overwrite)
    written = []
    with staged(out) as staging:
        for name, source in sources:
            folder = staging / name if compare else staging
            write_model(source, folder, card_name=str(out / name) if compare else str(out))
            written.append(Exported(source.run_dir, source.step, out / name if compare else out))
            if on_run is not None:
                on_run(written[-1])
    return written


def _inside(out: Path, run_dirs: list[Path]) -> bool:
    target = out.resolve()
    return any(target.is_relative_to(run_dir.resolve()) for run_dir in run_dirs)


def write_model(source: RunSource, folder: Path, *, card_name: str) -> None:
    """Write ``source``'s weights as a Hugging Face model folder with its card into ``folder`` (made if missing);
    ``card_name`` is the folder's name in the card's ``grpolab eval`` line."""
    evaluations = _evaluations(source)
    policy = load_model(source)
    model, tokenizer = policy.model, policy.tokenizer
    generation = model.generation_config
    if generation is not None:  # the ids grpolab samples with (it pads with EOS when the tokenizer has no pad)
        for name in ("pad_token_id", "eos_token_id", "bos_token_id"):
            if getattr(generation, name, None) is None and getattr(tokenizer, name, None) is not None:
                setattr(generation, name, getattr(tokenizer, name))
        # a base's length budget would override the harness's own (lm-eval's max_gen_toks): transformers lets
        # max_new_tokens win over the max_length a harness passes, so every task would be cut at the base's
        generation.max_new_tokens = None
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder), safe_serialization=True)
    tokenizer.save_pretrained(str(folder))
    card = model_card(source, evaluations, card_name, chat_template=bool(getattr(tokenizer, "chat_template", None)))
    (folder / "README.md").write_text(card, encoding="utf-8")


def _evaluations(source: RunSource) -> list[dict]:
    try:
        return read_evaluations(source.run_dir)
    except UserError as error:
        raise UserError(f"run {source.run_dir} is damaged: {error}") from None
