"""The TRL mapping of the enumerated settings, read from the schema: every choice of every mapped field
(``grpolab.config.fields.choices``) is either refused in one line by engine trl or becomes ``GRPOConfig``
arguments that TRL accepts and that differ from every other choice's, so a choice added to the schema cannot
pass to TRL unmapped (as a name TRL does not know, or silently as another choice)."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from grpolab.config import TrainConfig
from grpolab.config.fields import choices
from grpolab.errors import UserError
from grpolab.train.trl_engine.arguments import MAPPED, REFUSED, grpo_arguments

ENUMERATED = {name: allowed for name, allowed in choices(TrainConfig).items() if name in MAPPED}


def test_the_mapped_fields_with_choices() -> None:
    assert set(ENUMERATED) == {"lr_schedule", "loss_aggregation", "dtype", "vllm_mode", "importance_sampling_level",
                               "policy_loss"}
    assert {"reward_granularity", "sampler_dtype"} <= set(REFUSED)  # refused whole, at any value but the default


@pytest.mark.parametrize("name", sorted(ENUMERATED))
def test_every_choice_is_trl_arguments_of_its_own_or_refused(name: str, tmp_path) -> None:
    from trl import GRPOConfig

    effective: dict[str, tuple] = {}
    for value in ENUMERATED[name]:
        config = TrainConfig(engine="trl", steps=2, prompts_per_step=2, group_size=2, **{name: value})
        try:
            kwargs = grpo_arguments(config, output_dir=str(tmp_path), num_processes=1, max_new_tokens=8)
        except UserError as error:
            assert "not supported by engine trl" in str(error) and "\n" not in str(error)
            continue
        args = GRPOConfig(**kwargs)  # TRL accepts the names it gets
        keys = [key for key in MAPPED[name].targets if not key.startswith("peft_config")]
        effective[value] = tuple(str(getattr(args, key)) for key in keys)
    assert effective, f"engine trl refuses every {name}"
    assert len(set(effective.values())) == len(effective), f"two {name} choices reach TRL as one: {effective}"
