"""Real models' config.json files, written from the published ones, for the
capacity planner's tests."""

from pathlib import Path

CONFIGS = Path(__file__).parents[1] / "data" / "model_configs"
