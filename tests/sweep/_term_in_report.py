"""``grpolab`` (the CLI) with ``grpolab.sweep.compare`` replaced by a comparison that stops for good while it writes
``OUT/report.html`` (after half of it is in the staging file), having touched ``OUT/writing``: a test sends
SIGTERM there."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import grpolab.sweep
from grpolab.io import atomic_write_with


def _compare(sweep, base, out, **options):
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    def write(path: Path) -> None:
        path.write_text("<html><body>half a report")
        (out / "writing").touch()
        time.sleep(300)

    atomic_write_with(out / "report.html", write)


grpolab.sweep.compare = _compare

if __name__ == "__main__":
    from grpolab.cli import main

    sys.exit(main(sys.argv[1:]))
