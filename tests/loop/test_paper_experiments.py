"""The paper's experiment files against the release: `whale run FILE --dry-run` of each file in
experiments/paper/ says the value the release's launchers and scripts use, setting by setting
(tests/loop/release_values.py: each value with the release's file and line). Where the
workbench differs on purpose, DIFFERS says why, and docs/paper.md's table says so too."""

from pathlib import Path

import pytest

from app.config import Settings
from app.experiment_schema import DECODING_FIELDS
from app.loop.experiment import dry_run, load
from app.search.agent_presets import PRESETS
from tests.conftest import REPO
from tests.loop.release_values import RELEASE

FILES = sorted((REPO / "experiments" / "paper").glob("*.toml"))
DOMAIN_OF = {"searchqa": "searchqa", "math": "math", "chess": "chess"}

# Settings where the paper files differ from the release on purpose, and why (docs/paper.md,
# "Reproducing the paper", says the same).
DIFFERS = {
    ("searchqa", "optimizer_state_resumed"): (
        "the release's search-QA script never resumes (RESUME_MODE=disable): each weight phase "
        "retrains from the base model; the workbench continues from the phase's incoming "
        "checkpoint with a fresh optimizer, as chess does"
    ),
}


def release(domain: str, key: str):
    return RELEASE[domain][key].value


def plan_of(path: Path) -> dict:
    experiment, _ = load(path)
    settings = Settings(**experiment.runtime.model_dump(exclude_none=True))
    return dry_run(experiment, settings, str(path)) | {"experiment": experiment}


def test_there_is_a_file_for_each_domain_and_strategy():
    names = {f.stem for f in FILES}
    strategies = (
        "whale",
        "whale-adaptive",
        "weight-only",
        "harness-only",
        "stagewise",
        "fast-slow",
    )
    assert names == {f"{d}-{s}" for d in DOMAIN_OF for s in strategies}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_the_dry_run_says_the_release_s_settings(path):
    domain, _, strategy = path.stem.partition("-")
    plan = plan_of(path)
    exp = plan.pop("experiment")
    r = lambda key: release(domain, key)  # noqa: E731

    assert exp.runtime.llm_model == r("base_model") and exp.runtime.backend == "vllm"
    assert exp.runtime.vllm_max_model_len == r("max_model_len")
    assert exp.harness == (REPO / "harness_archive" / "paper" / domain / "h0.py").resolve()
    assert plan["scoring"] == "paper"

    rft = plan["rft"]
    assert rft["prompts_per_step"] == r("train_batch_size")
    assert rft["samples_per_prompt"] == r("rollout_n")
    assert rft["threshold"] == r("score_threshold")
    assert rft["lr"] == r("actor_lr")
    assert rft["weight_decay"] == r("weight_decay")
    assert rft["lora"] is False and r("fine_tune") == "full"
    assert (rft["batch_size"], rft["batch_unit"]) == (r("sft_mini_batch_size"), "rollout")
    assert rft["epochs"] == r("sft_epochs")
    # the release keeps every checkpoint it saves, one each save_freq steps
    assert (rft["keep_every"], r("max_ckpt_to_keep")) == (r("save_freq"), None)
    assert rft["max_seq_len"] == r("max_prompt_length") + r("max_response_length")
    resumed = {"run": True, "phase": False}[rft["optimizer_state"]]
    if (domain, "optimizer_state_resumed") not in DIFFERS:
        assert resumed == r("optimizer_state_resumed")

    # decoding fixed for every call, and the same for training, harness search and test
    sampling = plan["sampling"]
    assert set(sampling["fixed"]) == {"temperature", "top_p", "top_k", "chat_template_kwargs"}
    assert {"temperature", "top_p", "top_k"} <= set(DECODING_FIELDS)  # thinking is held too
    for prefix in ("rollout", "val", "harness_eval"):
        assert sampling["temperature"] == r(f"{prefix}_temperature")
        assert sampling["top_p"] == r(f"{prefix}_top_p")
        assert sampling["top_k"] == r(f"{prefix}_top_k")
    assert rft["temperature"] == r("rollout_temperature")
    assert sampling["chat_template_kwargs"] == {"enable_thinking": True}

    assert plan["test"]["k"] == r("val_n")
    assert plan["test"]["every_weight_steps"] == r("test_freq")
    rollout = plan["rollout"]
    assert rollout["max_completion_tokens"] == r("assistant_token_budget")
    assert rollout["max_tokens_per_call"] == r("assistant_token_budget")
    assert rollout["max_calls"] == r("max_turns")

    switching, budget = plan["switching"], plan["budget"]
    if strategy == "whale-adaptive":
        assert switching["rule"] == "adaptive"
        assert switching["harness_min_iterations"] == r("adaptive_mh_min_iters")
        assert switching["harness_patience"] == r("adaptive_mh_patience")
        assert switching["harness_max_iterations"] == r("adaptive_mh_max_iters")
        minimum = r("adaptive_round_steps")  # window = patience = the minimum phase
        assert switching["weight_burn_in"] == switching["weight_window"] == minimum
        assert switching["weight_patience"] == minimum and switching["weight_partial_windows"]
        assert budget["max_phases"] == 2 * r("adaptive_max_rounds")  # cycles of two phases
    elif strategy == "harness-only":
        assert switching["proposing_iterations"] == r("mh_only_iterations")
        assert budget["proposing_iterations"] == r("mh_only_iterations")
    else:
        assert switching["weight_steps"] == r("round_steps")
        assert switching["proposing_iterations"] == r("round_mh_iters")
        assert switching["proposing_iterations"] + 1 == r("harness_phase_i")
    if strategy == "weight-only":
        assert budget["weight_steps"] == r("total_steps_rsft_only")
    elif strategy != "harness-only":
        assert budget["weight_steps"] == r("total_steps_whale")
    assert "rollouts" not in budget  # the release's units, not a shared rollout budget

    if strategy != "weight-only":
        search = plan["search"]
        assert search["candidates"] == r("proposals_per_iter")
        assert search["tasks"] == r("harness_eval_examples")
        assert search["samples"] == r("harness_eval_samples_per_task")
    if strategy not in ("weight-only", "fast-slow"):
        agent = exp.search.agent
        assert agent.preset == "claude-code"
        preset = PRESETS["claude-code"]
        assert preset.model == r("proposer_model") and preset.effort == r("proposer_effort")
        assert plan["search"]["proposer_timeout_s"] == r("proposer_timeout_s")  # the preset's
        tools = agent.allowed_tools or list(preset.tools)
        assert sorted(tools) == sorted(r("proposer_allowed_tools"))
        argv = preset.argv("bwrap", agent.model, agent.effort, agent.allowed_tools)
        assert argv[argv.index("--model") + 1] == r("proposer_model")
        assert argv[argv.index("--effort") + 1] == r("proposer_effort")
        assert ("Bash" in argv[argv.index("--tools") + 1]) == r("proposer_has_bash")


def test_the_dry_run_prints_the_rollouts_the_release_s_units_imply():
    plan = plan_of(REPO / "experiments" / "paper" / "chess-whale.toml")
    # an RFT step's 2,048 rollouts are not held to 32 in flight: vLLM's batch is the cap
    assert plan["in_flight"].startswith("up to what the vLLM servers batch (max_num_seqs")
    work = plan["work"]
    # 256 steps in phases of 38: six of 38 and one of 28, a harness phase after each but the last
    assert (work["weight_phases"], work["harness_phases"]) == (7, 6)
    assert work["weight_rollouts"] == 256 * 256 * 8
    sweep = min(256, plan["split_sizes"]["harness"])
    assert work["harness_rollouts"] == 6 * sweep + 30 * 3 * (sweep + 1)
    assert work["rollouts"] == work["weight_rollouts"] + work["harness_rollouts"]


def test_each_deliberate_difference_is_in_the_docs():
    page = (REPO / "docs" / "paper.md").read_text()
    assert page.startswith("# Reproducing the paper")
    assert "RESUME_MODE=disable" in page
    assert all(key in RELEASE[domain] for domain, key in DIFFERS)
