"""``python -m grpolab.integrations.lm_eval ARGS``: lm-eval's command line (``lm_eval ARGS``) with the ``grpolab``
model backend registered, e.g. ``python -m grpolab.integrations.lm_eval --model grpolab --model_args
pretrained=runs/sign --include_path tasks/ --tasks grpolab_reverse --log_samples --output_path out/``."""

from __future__ import annotations


def main() -> None:
    import sys

    try:
        from lm_eval.__main__ import cli_evaluate
    except ImportError:
        sys.exit("python -m grpolab.integrations.lm_eval: error: lm-eval is not installed; install grpolab's extra: "
                 "pip install -e '.[lm_eval]' (or pip install 'lm-eval==0.4.13')")
    from grpolab.integrations.lm_eval.backend import register

    register()
    cli_evaluate()


if __name__ == "__main__":
    main()
