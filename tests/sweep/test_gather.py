"""The tables gathered from ended runs: finished and diverged runs, each row with its variant and status."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from grpolab.config import TrainConfig, save_config
from grpolab.sweep.gather import collect_results, runs_table
from grpolab.sweep.plan import plan_runs
from grpolab.sweep.run import run_sweep
from grpolab.sweep.variants import parse_vary
from sweep_runs import diverge, finish

BASE = TrainConfig(steps=4, lr=1e-4)


def test_results_come_from_ended_runs_and_carry_status_and_variant(tmp_path: Path) -> None:
    specs = plan_runs(BASE, ["sign", "rloo", "grpo"], [0], [2], tmp_path, variants=parse_vary("max_grad_norm=0"))
    finish(specs[0], 0.75, passk={"1": 0.5, "10": 0.9, "2": 0.6})
    specs[1].run_dir.mkdir(parents=True)  # started, never finished
    diverge(specs[2], at_step=3)
    results, metrics = collect_results(specs, {specs[0].cell: True, specs[2].cell: False})
    assert results["run_id"].unique().tolist() == [specs[0].run_id, specs[2].run_id]
    assert set(results["variant"]) == {"max_grad_norm=0"} and set(metrics["variant"]) == {"max_grad_norm=0"}
    end = results[results["phase"] == "end"].iloc[0]
    assert end["greedy_accuracy"] == 0.75 and end["pass_at_k"] == [0.5, 0.6, 0.9]  # k in numeric order
    assert end["lr"] == 1e-4 and end["steps"] == 4 and end["status"] == "finished" and end["bracketed"]
    diverged = results[results["run_id"] == specs[2].run_id]
    assert diverged["phase"].tolist() == ["start"] and diverged["status"].tolist() == ["diverged"]  # never a 0%
    assert diverged["diverged_at_step"].tolist() == [3.0] and results.loc[results["status"] == "finished",
                                                                        "diverged_at_step"].isna().all()
    assert metrics.groupby("run_id")["status"].first().to_dict() == {specs[0].run_id: "finished",
                                                                     specs[2].run_id: "diverged"}
    runs = runs_table([], specs, None)
    assert runs["status"].tolist() == ["finished", "diverged"] and runs["end_greedy"].isna().tolist() == [False, True]
    assert runs["bracketed"].isna().all()  # no lr was chosen
    assert run_sweep([specs[0], specs[2]]) == []  # an ended run, diverged too, is never trained again


def test_an_old_sweep_without_variants_or_status_gathers_as_before(tmp_path: Path) -> None:
    specs = plan_runs(BASE, ["sign"], [0], [2], tmp_path)
    finish(specs[0], 0.5, status=None)
    results, _ = collect_results(specs)
    assert results["run_id"].tolist() == ["sign-G2-seed0"] * 2 and set(results["variant"]) == {""}
    assert set(results["status"]) == {"finished"} and results["bracketed"].isna().all()


def test_a_run_saved_with_other_settings_is_not_a_result(tmp_path: Path) -> None:
    specs = plan_runs(TrainConfig(steps=8), ["sign", "rloo"], [0], [2], tmp_path)
    finish(specs[0], 0.5)
    finish(specs[1], 0.5, config=specs[1].config.replace(steps=5))
    results, _ = collect_results(specs)
    assert set(results["run_id"]) == {specs[0].run_id}
    assert specs[0].finished and not specs[1].ended  # so the sweep tries it again, and reports the refusal


def test_a_run_its_budget_ended_early_is_complete_up_to_its_end_evaluation(tmp_path: Path) -> None:
    spec = plan_runs(BASE.replace(steps=10, budget="completions=32"), ["sign"], [0], [2], tmp_path)[0]
    finish(spec, 0.5)
    rows = [{"step": 0, "phase": "start", "split": "test", "greedy_accuracy": 0.0},
            {"step": 2, "phase": "end", "split": "test", "greedy_accuracy": 0.5}]
    (spec.run_dir / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (spec.run_dir / "metrics.jsonl").write_text('{"step": 1, "loss/total": 0.1}\n{"step": 2, "loss/total": 0.1}\n')
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "lacks step(s) 3-10" warning: the budget ended it at step 2
        results, metrics = collect_results([spec])
    assert metrics["step"].tolist() == [1, 2] and results["phase"].tolist() == ["start", "end"]
    (spec.run_dir / "metrics.jsonl").write_text('{"step": 1, "loss/total": 0.1}\n')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        collect_results([spec])
    assert any("lacks step(s) 2 of its 2" in str(w.message) for w in caught)


def test_a_run_stopped_for_no_signal_is_gathered_with_its_end_score_and_status(tmp_path: Path) -> None:
    spec = plan_runs(BASE.replace(steps=10, stop_when_dead=True), ["dr_grpo"], [0], [2], tmp_path)[0]
    spec.run_dir.mkdir(parents=True)
    save_config(spec.config, spec.run_dir / "config.yaml")
    summary = {"status": "no_signal", "no_signal_at_step": 3, "reason": "no gradient signal in the first 3 step(s)"}
    (spec.run_dir / "summary.json").write_text(json.dumps(summary))
    rows = [{"step": 0, "phase": "start", "greedy_accuracy": 0.25},
            {"step": 3, "phase": "end", "greedy_accuracy": 0.25}]
    (spec.run_dir / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (spec.run_dir / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in (1, 2, 3)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # neither "lacks steps 4-10" nor "no end evaluation"
        results, metrics = collect_results([spec])
    assert results["status"].tolist() == ["no_signal"] * 2 and results["no_signal_at_step"].tolist() == [3.0, 3.0]
    assert results["phase"].tolist() == ["start", "end"] and set(metrics["status"]) == {"no_signal"}
    assert spec.ended and run_sweep([spec]) == []  # an ended run: never trained again


def test_results_and_runs_carry_the_compute_each_run_spent_by_each_evaluation(tmp_path: Path) -> None:
    counted, older = plan_runs(BASE.replace(steps=2), ["sign", "dr_grpo"], [0], [2], tmp_path)
    finish(counted, 0.5)
    finish(older, 0.5)  # its metrics rows predate the counters
    rows = [{"step": step, "compute/optimizer_steps_total": step, "compute/trained_sequences_total": 4 * step,
             "compute/trained_tokens_total": 30 * step, "compute/forward_tokens_total": 70 * step,
             "rollout/tokens_generated": 35 * step} for step in (1, 2)]
    (counted.run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    names = ["optimizer_steps", "trained_sequences", "trained_tokens", "forward_tokens", "sampled_tokens"]
    results, _ = collect_results([counted, older])
    by_phase = results[results["run_id"] == counted.run_id].set_index("phase")[names]
    assert by_phase.loc["start"].tolist() == [0, 0, 0, 0, 0]
    assert by_phase.loc["end"].tolist() == [2, 8, 60, 140, 70]
    assert results.loc[results["run_id"] == older.run_id, names].isna().all().all()  # not recorded, not 0
    runs = runs_table([], [counted, older], None).set_index("run_id")
    assert runs.loc[counted.run_id, names].tolist() == [2, 8, 60, 140, 70]
    assert runs.loc[older.run_id, names].isna().all()
