"""Adapters that bring grpolab estimators and starvation metrics into TRL and verl."""
