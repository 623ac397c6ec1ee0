"""Subcommands of the ``grpolab`` command line (see ``grpolab.cli``)."""
