"""``grpolab`` as its console script runs it: this file's folder, not the current directory, first on sys.path."""

import sys

from grpolab.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
