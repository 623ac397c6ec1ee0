"""``python -m grpolab.integrations.lm_eval ARGS``: lm-eval's command line (``lm_eval ARGS``) with the ``grpolab``
model backend registered, e.g. ``python -m grpolab.integrations.lm_eval --model grpolab --model_args
pretrained=runs/sign --include_path tasks/ --tasks grpolab_reverse --log_samples --output_path out/``. A grpolab
``UserError`` (a model that does not load, an unknown model arg) ends it with one line and exit code 2."""

from __future__ import annotations

import sys

from grpolab.errors import UserError

PROG = "python -m grpolab.integrations.lm_eval"


def main() -> None:
    try:
        from lm_eval.__main__ import cli_evaluate
    except ImportError:
        sys.exit(f"{PROG}: error: lm-eval is not installed; install grpolab's extra: pip install -e '.[lm-eval]' "
                 "(or pip install 'lm-eval==0.4.13')")
    from grpolab.integrations.lm_eval.backend import register

    register()
    try:
        cli_evaluate()
    except UserError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
