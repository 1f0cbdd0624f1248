"""A small model for the tests of the trainer's mechanics."""

from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from app.llm.local import prepare_model

# SmolLM2-135M narrowed and cut to two layers; its head size, vocabulary, tied embeddings and
# tokenizer (with its chat template) are kept, so every code path of the real model runs.
TINY = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": 2,
}


@pytest.fixture(scope="session")
def tiny_model(model_cache, tmp_path_factory) -> Path:
    """SmolLM2's architecture at a 20th of its size, with seeded random weights.

    For tests whose assertions hold for any weights (two ways of training end on the same
    weights, optimizer steps are counted, a checkpoint is written once and loads): the real
    model made each of them cost half a minute of processor time. What the real model learns is
    tested on it (test_train.py's loss test, test_rft.py)."""
    real = prepare_model(model_cache)
    config = AutoConfig.from_pretrained(real)
    config.update(TINY)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    folder = tmp_path_factory.mktemp("tiny-smollm2")
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(real).save_pretrained(folder)
    return folder
