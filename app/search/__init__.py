"""The harness phase: proposers write candidate harnesses, validation, Pareto selection."""
