"""Whale workbench: joint harness-weight optimization of LLM agents."""

from pathlib import Path

# Repository root: templates/, static/, sandbox/ and harness_archive/ live beside the package.
ROOT = Path(__file__).resolve().parent.parent
