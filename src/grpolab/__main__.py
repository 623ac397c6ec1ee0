"""``python -m grpolab ...``: the same command line as ``grpolab ...``, for environments whose scripts
folder is not on PATH (a worker's interpreter, a cluster job that only knows ``python``)."""

import sys

from grpolab.cli import main

sys.exit(main())
