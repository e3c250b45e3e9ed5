"""Shared test configuration: hypothesis profiles sized for the CI budget."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# "ci": enough examples across the suite for thousands of configurations, inside the 10-minute
# budget on 2 cores. "dev": a deeper sweep (HYPOTHESIS_PROFILE=dev).
settings.register_profile(
    "ci", max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
