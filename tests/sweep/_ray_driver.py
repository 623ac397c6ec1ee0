"""A sweep process on the Ray backend, as far as the local cluster: ``run_ray`` with no runs starts the local Ray
(and its reaper), then the process prints ``ready`` and waits to be killed."""

from __future__ import annotations

import time

from grpolab.sweep.cluster import run_ray

if __name__ == "__main__":
    run_ray([], 1, lambda event: None)
    print("ready", flush=True)
    time.sleep(600)
