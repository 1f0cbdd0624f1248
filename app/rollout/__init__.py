"""Evaluation: harness x checkpoint x split x k -> rollouts -> mean@k."""
