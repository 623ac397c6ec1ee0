"""The one config schema of a training run and of a sweep (``schema``), its value checks (``checks``) and its
config files (``files``). Everything a user imports is re-exported here: ``from grpolab.config import
TrainConfig``."""

from grpolab.config.files import build_config, load_config_file, save_config, split_file_values, yaml_text
from grpolab.config.schema import CompareConfig, TrainConfig

__all__ = ["CompareConfig", "TrainConfig", "build_config", "load_config_file", "save_config", "split_file_values",
           "yaml_text"]
