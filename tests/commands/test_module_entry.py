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
