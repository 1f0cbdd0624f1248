"""The paper's experiment files against the release: `whale run FILE --dry-run` of each file in
experiments/paper/ says the value the release's launchers and scripts use, setting by setting
(tests/loop/release_values.py: each value with the release's file and line). Where the
workbench differs on purpose, DIFFERS says why, and docs/paper.md's table says so too."""

from pathlib import Path

import pytest

from app.config import Settings
from app.experiment_schema import DECODING_FIELDS
from app.loop.experiment_file import dry_run, load
from app.search.agent_presets import PRESETS
from tests.conftest import REPO
from tests.loop.release_values import RELEASE

FILES = sorted((REPO / "experiments" / "paper").glob("*.toml"))
DOMAIN_OF = {"searchqa": "searchqa", "math": "math", "chess": "chess"}

# Settings where the paper files differ from the release on purpose, and why (docs/paper.md,
# "Reproducing the paper", says the same).
DIFFERS = {
    ("searchqa", "train_batch_size"): (
        "the release has two readings of its search-QA data: its docs and launchers count "
        "18,946 NQ + HotpotQA questions at 256 prompts a step (74 steps an epoch, E = 0.6 "
        "epoch), its training script's defaults 4,480 NQ questions at 64; the paper files take "
        "the first, the paper's D_weight"
    ),
    ("searchqa", "train_set"): (
        "the script's default train_nq_single.parquet (NQ only) is the second reading; the "
        "paper files train on the NQ + HotpotQA file the docs name (docs/data.md:37)"
    ),
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
    assert rft["samples_per_prompt"] == r("rollout_n")
    assert rft["threshold"] == r("score_threshold")
    assert rft["lr"] == r("actor_lr")
    assert rft["weight_decay"] == r("weight_decay")
    assert rft["lora"] is False and r("fine_tune") == "full"
    assert (rft["batch_size"], rft["batch_unit"]) == (r("sft_mini_batch_size"), "rollout")
    assert rft["batch_scope"] == "rank"  # verl's SFT mini-batch is per data-parallel rank
    assert rft["micro_batch_size"] == r("sft_micro_batch_size_per_gpu")  # memory only
    assert rft["epochs"] == r("sft_epochs")
    # the release keeps every checkpoint it saves, one each save_freq steps
    assert (rft["keep_every"], r("max_ckpt_to_keep")) == (r("save_freq"), None)
    # the response window at h0's turns; search QA's grows by 1024 a turn, as the release's
    turns = plan["schedule"]["turns"]
    assert turns["harness_max_turns"] == r("max_turns")  # h0's MAX_TURNS, read from its file
    assert rft["max_seq_len_per_turn"] == r("response_tokens_per_turn")
    assert turns["max_seq_len"] == r("max_prompt_length") + r("max_response_length")
    # the release's response window: MAX_RESP_LENGTH + per turn x turns (the rest: the prompt)
    assert rft["max_seq_len"] == r("max_prompt_length") + r("max_response_length") - r(
        "response_tokens_per_turn"
    ) * r("max_turns")
    resumed = {"run": True, "phase": False}[rft["optimizer_state"]]
    if (domain, "optimizer_state_resumed") not in DIFFERS:
        assert resumed == r("optimizer_state_resumed")
    # verl resumes nothing only with resume_mode "disable": the one difference listed
    assert (r("resume_mode") == "disable") == ((domain, "optimizer_state_resumed") in DIFFERS)

    # decoding fixed for every call, and the same for training, harness search and test
    sampling = plan["sampling"]
    assert set(sampling["override_harness"]) == {
        "temperature",
        "top_p",
        "top_k",
        "chat_template_kwargs",
    }
    assert {"temperature", "top_p", "top_k"} <= set(DECODING_FIELDS)  # thinking is held too
    for temperature, top_p, top_k in (
        ("rollout_temperature", "rollout_top_p", "rollout_top_k"),
        ("val_temperature", "val_top_p", "val_top_k"),
        ("harness_eval_temperature", "harness_eval_top_p", "harness_eval_top_k"),
    ):
        assert sampling["temperature"] == r(temperature)
        assert sampling["top_p"] == r(top_p)
        assert sampling["top_k"] == r(top_k)
    assert rft["temperature"] == r("rollout_temperature")
    assert sampling["chat_template_kwargs"] == {"enable_thinking": True}

    assert plan["test"]["k"] == r("val_n")
    assert plan["test"]["every_weight_steps"] == r("test_freq")
    rollout = plan["rollout"]
    assert rollout["max_completion_tokens"] == r("assistant_token_budget")
    assert rollout["max_tokens_per_call"] == r("assistant_token_budget")
    # the turn budget is the harness's own: max_calls is the release's clamp, h0 declares its
    # MAX_TURNS below it, and the harness search's evaluation turns fit under the clamp too
    assert rollout["max_calls"] == turns["clamp"] == r("max_turns_clamp")
    assert turns["turns"] == r("max_turns") <= r("harness_eval_max_turns") <= r("max_turns_clamp")

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
        assert switching["proposing_iterations_per_phase"] == r("mh_only_iterations")
        assert budget["proposing_iterations"] == r("mh_only_iterations")
    else:
        assert switching["weight_steps_per_phase"] == r("round_steps")
        assert switching["proposing_iterations_per_phase"] == r("round_mh_iters")
        assert switching["proposing_iterations_per_phase"] + 1 == r("harness_phase_i")
    if strategy == "weight-only":
        assert budget["weight_steps"] == r("total_steps_rsft_only")
    elif strategy != "harness-only":
        assert budget["weight_steps"] == r("total_steps_whale")
    assert "rollouts" not in budget  # the release's units, not a shared rollout budget

    # epochs at the release's training split: E = 0.6 epoch, 4 (6 in math) epochs a run
    epochs = plan["schedule"]["epochs"]["paper_size"]
    assert epochs["rows"] == r("train_size")
    assert round(r("train_size") / rft["prompts_per_step"]) == r("steps_per_epoch")
    if (domain, "train_batch_size") not in DIFFERS:
        assert rft["prompts_per_step"] == r("train_batch_size")
    if strategy in ("whale", "weight-only", "stagewise", "fast-slow"):
        e = r("round_steps") / r("steps_per_epoch")  # E = 0.6 epoch
        assert all(abs(x - e) < 0.01 for x in epochs["per_weight_phase"])
        assert round(epochs["per_run"]) == r("total_steps_whale") // r("steps_per_epoch")
    batch = plan["schedule"]["batch"]
    assert batch["per_optimizer_step"] == r("sft_mini_batch_size") * batch["training_processes"]
    # on the release's trainer (6, 8, 4 GPUs) a step holds 384, 512, 256 accepted rollouts
    from app.loop.schedule import effective_batch

    gpus = Settings(train_accelerate_args=f"--num_processes {r('trainer_gpus')}")
    release_step = effective_batch(exp, gpus)["per_optimizer_step"]
    assert release_step == r("sft_mini_batch_size") * r("trainer_gpus")

    if strategy != "weight-only":
        search = plan["search"]
        assert search["candidates"] == r("proposals_per_iter")
        assert search["tasks"] == r("harness_eval_examples")
        assert search["samples"] == r("harness_eval_samples_per_task")
        # the release's chess candidate is a restricted module over a fixed runner
        assert search["fixed_functions"] == (["run"] if domain == "chess" else [])
    if strategy not in ("weight-only", "fast-slow"):
        agent = exp.search.agent
        assert agent.preset == "claude-code"
        preset = PRESETS["claude-code"]
        assert preset.model == r("proposer_model") and preset.effort == r("proposer_effort")
        assert plan["search"]["proposer_timeout_s"] == r("proposer_timeout_s")  # the preset's
        tools = agent.allowed_tools or list(preset.tools)
        assert sorted(tools) == sorted(r("proposer_allowed_tools"))
        argv = preset.argv(
            "bwrap", agent.model, agent.effort, agent.allowed_tools, agent.system_prompt
        )
        assert argv[argv.index("--model") + 1] == r("proposer_model")
        assert argv[argv.index("--effort") + 1] == r("proposer_effort")
        assert ("Bash" in argv[argv.index("--tools") + 1]) == r("proposer_has_bash")
        # the release's proposer starts a fresh directory each round
        assert plan["search"]["workspace"] == "round"
        appended = RELEASE[domain].get("proposer_system_prompt")
        if appended is None:
            assert "--append-system-prompt" not in argv
        else:  # the release's rules, in this workspace's paths
            text = argv[argv.index("--append-system-prompt") + 1]
            for rule in (
                "Do not run shell commands.",
                "Do not write to /tmp or to any absolute path outside the current working "
                "directory.",
                "The harness must never reveal or infer hidden puzzle solutions.",
            ):
                assert rule in appended.value and rule in text


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
    assert "## Search QA's epochs" in page and "18,946 / 256" in page  # the reading chosen
    assert "## Differences that remain" in page
    assert all(key in RELEASE[domain] for domain, key in DIFFERS)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_the_printed_dry_run_gives_epochs_the_effective_batch_and_the_turn_clamp(path):
    from app.cli.loop import format_plan

    domain = path.stem.partition("-")[0]
    plan = plan_of(path)
    plan.pop("experiment")
    lines = format_plan(plan).splitlines()
    turns = next(line for line in lines if line.startswith("turns: "))
    clamp = release(domain, "max_turns_clamp")
    assert f"MAX_TURNS {release(domain, 'max_turns')}, clamp {clamp}" in turns
    rows = f"{release(domain, 'train_size'):,} rows"
    paper = next(line for line in lines if line.startswith("epochs (the paper: "))
    assert rows in paper and "per weight phase" in paper and "per run" in paper
    assert any(line.startswith("epochs (the train split found: ") for line in lines)
    batch = next(line for line in lines if line.startswith("SFT batch: "))
    assert "64 rollouts per data-parallel process x 1 training process(es)" in batch
    assert batch.endswith("= 64 rollouts per optimizer step")


def test_the_effective_batch_counts_the_training_processes_of_a_per_rank_mini_batch(tmp_path):
    """verl's SFT mini-batch is per data-parallel rank: 8 processes step on 8 x 64 rollouts."""
    from app.loop.schedule import effective_batch

    exp, _ = load(REPO / "experiments" / "paper" / "math-whale.toml")
    fsdp = REPO / "configs" / "accelerate" / "fsdp.yaml"  # num_processes: 8
    settings = Settings(train_accelerate_config=fsdp)
    assert effective_batch(exp, settings)["per_optimizer_step"] == 8 * 64
    assert effective_batch(exp, Settings(train_accelerate_args="--num_processes 2")) == {
        "batch_size": 64,
        "scope": "rank",
        "unit": "rollout",
        "training_processes": 2,
        "per_optimizer_step": 128,
    }
    exp.rft.batch_scope = "global"  # the workbench's default: the step's whole batch
    assert effective_batch(exp, settings)["per_optimizer_step"] == 64
