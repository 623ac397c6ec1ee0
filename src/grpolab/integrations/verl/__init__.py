"""verl adapter: grpolab's estimators as verl advantage estimators (``estimators``), verl's conventions for
them (``parity``), ``starvation/*`` metrics from a verl batch (``metrics``), and the ``verl.plugins`` entry
point that registers them on ``import verl`` (``plugin``). Importing this package registers nothing.
"""

from grpolab.integrations.verl.estimators import (
    CONVENTIONS,
    PREFIX,
    VERL_COUNTERPARTS,
    group_by_index,
    make_adv_estimator,
    outcome_advantages,
    register_all,
)

__all__ = ["CONVENTIONS", "PREFIX", "VERL_COUNTERPARTS", "group_by_index", "make_adv_estimator", "outcome_advantages",
           "register_all"]
