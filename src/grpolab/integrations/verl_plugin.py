"""Import this module to register every grpolab estimator with verl (``grpolab_<name>``).

It is the target of verl's plugin hooks, which import a module and nothing more: the ``verl.plugins``
entry point (loaded by ``import verl``) or ``VERL_USE_EXTERNAL_MODULES=grpolab.integrations.verl_plugin``.
Registering is the whole point of importing it; ``grpolab.integrations.verl`` itself has no import-time
side effects.
"""

from __future__ import annotations

from grpolab.integrations.verl import register_all

REGISTERED = register_all()
