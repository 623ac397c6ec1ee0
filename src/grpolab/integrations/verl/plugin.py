"""Import this module to register every grpolab estimator with verl (``grpolab_<name>``).

It is the target of grpolab's ``verl.plugins`` entry point, which ``import verl`` loads once grpolab is
installed (verl's plugin hooks import a module and nothing more). Registering is the whole point of
importing it; ``grpolab.integrations.verl`` itself has no import-time side effects.

Departure from verl's plugin loading: verl 0.9.1 logs a plugin that fails to load at DEBUG level only,
so a user would see nothing but "Unknown advantage estimator" later. This module logs its own failure
at WARNING level (logger ``grpolab.integrations.verl.plugin``) and then re-raises it.
"""

from __future__ import annotations

import logging

_LOG = logging.getLogger(__name__)

try:
    from grpolab.integrations.verl.estimators import register_all

    REGISTERED = register_all()
except Exception as error:
    _LOG.warning(
        "grpolab's verl plugin failed to load, so no grpolab_* advantage estimator is registered: %s: %s",
        type(error).__name__,
        error,
    )
    raise
