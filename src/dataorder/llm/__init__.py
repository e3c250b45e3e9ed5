"""LLM pretraining: Megatron-style micro-batch samplers, batch-size schedules and mixtures."""
