"""``python -m grpolab`` runs the same command line as the ``grpolab`` script."""

import subprocess
import sys


def test_python_dash_m_runs_the_command_line():  # the table itself goes to stdout
    result = subprocess.run([sys.executable, "-m", "grpolab", "estimators", "--markdown"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "sign" in result.stdout and "dr_grpo" in result.stdout


def test_python_dash_m_reports_bad_input_in_one_line():
    result = subprocess.run([sys.executable, "-m", "grpolab", "train", "--group-size", "0"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "group" in result.stderr


def test_train_prints_its_scores_on_stdout_and_progress_on_stderr(tmp_path):
    result = subprocess.run([sys.executable, "-m", "grpolab", "train", "--steps", "1", "--prompts-per-step", "2",
                             "--eval-limit", "8", "--out", str(tmp_path / "run")], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    assert "end: greedy accuracy" in result.stdout and "run directory:" in result.stdout
    assert "greedy accuracy" not in result.stderr
