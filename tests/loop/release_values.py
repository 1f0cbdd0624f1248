"""Experiment settings of the WHALE release, read from krafton-ai/WHALE.

Every value below is what the authors' published code sets for one of the three domains (search
QA = ``domains/search_qa``, math = ``domains/math_reasoning``, chess = ``domains/chess_puzzles``),
with the ``path:line`` that decides it. Paths are relative to the release's root unless they name
another repository (``volcengine/verl:...``, upstream verl, whose defaults the release's vendored
copy relies on). Line 1 is a file's first line.

Commits. The newest release commit read is 21b6444bef39dbbf133ae34c59aa79fc4b43c992 (it renamed
the minimal search-QA harness to ``base_harness.py``). Not every file has a version at that
commit; each file was read at the newest version available, listed in ``FILE_COMMITS``
(09314001ca55dbe16aa0895f4f7f85dc93b7eea5 and 7d5a422a65fe49835ce8b89e65aac4ac6449557c are the
two earlier commits; a file with one stored version is unchanged since 7d5a422a).

Where a value comes through a default chain (a launcher's ``${X:-default}`` handed to a training
script, a training script's default, or verl's own config), the citation is the place that
decides the value and the note says so. ``None`` means the release does not set it anywhere that
could be found; the note says where we looked.
"""

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Setting:
    """One release value and where the release sets it."""

    value: Any
    where: str
    note: str = ""


LATEST_COMMIT = "21b6444bef39dbbf133ae34c59aa79fc4b43c992"
C_21B6 = LATEST_COMMIT
C_0931 = "09314001ca55dbe16aa0895f4f7f85dc93b7eea5"
C_7D5A = "7d5a422a65fe49835ce8b89e65aac4ac6449557c"

ALTERNATE = "run/lib/alternate.sh"
DATA_MD = "docs/data.md"
REPRODUCING_MD = "docs/reproducing.md"

SQ = "domains/search_qa"
SQ_TRAIN = f"{SQ}/scripts/nq_hotpotqa/train_grpo_qwen3_5_2b_paper.sh"
SQ_MH = f"{SQ}/meta_harness/meta_harness_search_r1.py"
SQ_TOML = f"{SQ}/configs/meta_harness/searchr1.toml"
SQ_HARNESS = f"{SQ}/environments/search_r1/base_harness.py"
SQ_MH_DATA = f"{SQ}/scripts/data_process/build_meta_harness_nq_256.py"
SQ_GRPO_YAML = f"{SQ}/configs/search_multiturn_grpo.yaml"
SQ_RAY_TRAINER = f"{SQ}/verl/trainer/ppo/ray_trainer.py"

MA = "domains/math_reasoning"
MA_TRAIN = f"{MA}/scripts/train_grpo_qwen3_5_2b_retool.sh"
MA_MH = f"{MA}/meta_harness/meta_harness_retool.py"
MA_CONFIG = f"{MA}/meta_harness/config-retool.json"
MA_HARNESS = f"{MA}/environments/retool/base_harness.py"
MA_EPOCHS = f"{MA}/scripts/resolve_epoch_steps.py"
MA_BENCH = f"{MA}/meta_harness/benchmark.py"

CH = "domains/chess_puzzles"
CH_TRAIN = f"{CH}/scripts/train_chess_puzzle_multinode_disagg.sh"
CH_MH = f"{CH}/meta_harness/meta_harness_chess_puzzle.py"
CH_CONFIG = f"{CH}/meta_harness/config-chess-puzzle.json"
CH_HARNESS = f"{CH}/environments/chess_puzzle/base_harness.py"
CH_DATA = f"{CH}/autoharness_chess_puzzle/grpo_dataset.py"
SQ_FINAL_TEST = f"{SQ}/scripts/data_process/build_final_test_excluding_val.py"
SQ_TURNS = f"{SQ}/scripts/resolve_harness_max_turns.py"

VERL_OPTIM = "volcengine/verl:verl/trainer/config/optim/fsdp.yaml"
VERL_ACTOR = "volcengine/verl:verl/trainer/config/actor/actor.yaml"
VERL_MODEL = "volcengine/verl:verl/trainer/config/model/hf_model.yaml"

FILE_COMMITS = {
    ALTERNATE: C_0931,
    DATA_MD: C_21B6,
    REPRODUCING_MD: C_21B6,
    f"{SQ}/run/whale.sh": C_21B6,
    f"{SQ}/run/rsft_only.sh": C_21B6,
    f"{SQ}/run/mh_only.sh": C_21B6,
    f"{SQ}/run/adaptive_whale.sh": C_21B6,
    SQ_HARNESS: C_21B6,
    f"{MA}/run/whale.sh": C_0931,
    f"{MA}/run/rsft_only.sh": C_0931,
    f"{MA}/run/mh_only.sh": C_0931,
    f"{MA}/run/adaptive_whale.sh": C_0931,
    f"{CH}/run/whale.sh": C_0931,
    f"{CH}/run/rsft_only.sh": C_0931,
    f"{CH}/run/mh_only.sh": C_0931,
    f"{CH}/run/adaptive_whale.sh": C_0931,
    # One stored version each, unchanged since 7d5a422a.
    SQ_TRAIN: C_7D5A,
    SQ_MH: C_7D5A,
    SQ_TOML: C_7D5A,
    SQ_MH_DATA: C_7D5A,
    SQ_GRPO_YAML: C_7D5A,
    SQ_RAY_TRAINER: C_7D5A,
    MA_TRAIN: C_7D5A,
    MA_MH: C_7D5A,
    MA_CONFIG: C_7D5A,
    MA_HARNESS: C_7D5A,
    MA_EPOCHS: C_7D5A,
    MA_BENCH: C_7D5A,
    CH_TRAIN: C_7D5A,
    CH_MH: C_7D5A,
    CH_CONFIG: C_7D5A,
    CH_HARNESS: C_7D5A,
    CH_DATA: C_7D5A,
    SQ_FINAL_TEST: C_7D5A,
    SQ_TURNS: C_7D5A,
    # Upstream verl (not part of the release), at the versions read.
    VERL_OPTIM: "462dd6f128b47ca14457dadcc469ea7185a71737",
    VERL_ACTOR: "03d67c629a31ac64bb1506c03e74ea11f48133c1",
    VERL_MODEL: "17aa18cb172d0a2a7a38776a1704bd54b4bb056a",
}

_NO_OPTIM_OVERRIDE = (
    "default chain: no release script sets actor.optim.weight_decay, so verl's FSDP optimizer "
    "default (AdamW, weight_decay 0.01, betas (0.9, 0.999), clip_grad 1.0) applies; read from "
    "upstream verl because the release's vendored copy of this yaml is not in the index"
)
_FULL_FINE_TUNE = (
    "default chain: no release script sets model.lora_rank, so verl's default 0 (no LoRA) "
    "applies: full-parameter FSDP training"
)
_I_COUNTS_INCOMING = (
    "alternate.sh passes --iterations ROUND_MH_ITERS; the harness search first evaluates the "
    "incoming harness (its 'Phase 0', not an iteration), so the paper's I = ROUND_MH_ITERS + 1 = 6"
)
_ADAPTIVE_WEIGHT_RULE = (
    "minimum weight phase, 0.2 epoch. alternate.sh never passes the weight-phase patience rule "
    "(trainer.online_rsft.early_stop.* exists in ray_trainer._fit_online_rsft but is off), so "
    "as released every adaptive weight phase is exactly this long, contrary to reproducing.md"
)
_PROPOSER_TIMEOUT = "seconds per proposer session (one Claude Code CLI run per iteration)"
_PROPOSER_MODEL = (
    "Claude Code CLI (`claude -p --dangerously-skip-permissions`), see claude_wrapper.py"
)
_SFT_FROM_ALTERNATE = "alternate.sh hands it to the training script as +trainer.online_rsft.*"
_THRESHOLD = (
    "a rollout is accepted when its score is strictly greater (ray_trainer._fit_online_rsft)"
)

RELEASE: dict[str, dict[str, Setting]] = {
    "searchqa": {
        "base_model": Setting("Qwen/Qwen3.5-2B", f"{SQ}/run/whale.sh:13"),
        "starting_harness_whale": Setting(
            f"{SQ}/environments/search_r1/base_harness.py",
            f"{SQ}/run/whale.sh:12",
            "the minimal harness: top-1 passage, 200-token cap, 2 turns, minimal prompt. At "
            "09314001 whale.sh pointed at stupid_harness.py (same contract); 21b6444b renamed it "
            "base_harness.py and moved the shared machinery to search_r1_env.py (that file is "
            "not in the index)",
        ),
        "starting_harness_rsft_only": Setting(
            f"{SQ}/environments/search_r1/base_harness.py", f"{SQ}/run/rsft_only.sh:10"
        ),
        "starting_harness_mh_only": Setting(
            f"{SQ}/environments/search_r1/base_harness.py",
            f"{SQ}/run/mh_only.sh:10",
            "passed as BASELINE_HARNESS_OVERRIDE",
        ),
        "total_steps_whale": Setting(296, f"{SQ}/run/whale.sh:14", "4 epochs at 74 steps"),
        "total_steps_rsft_only": Setting(296, f"{SQ}/run/rsft_only.sh:12", "4 epochs at 74 steps"),
        "steps_per_epoch": Setting(
            74,
            f"{SQ}/run/whale.sh:14",
            "a comment, not computed: 18,946 questions / 256 prompts. The training script actually "
            "runs 64 prompts a step on train_nq_single.parquet (its comments say 4,480 NQ rows, "
            "70 steps an epoch); the launchers pass neither TRAIN_BATCH_SIZE nor TRAIN_FILES",
        ),
        "round_steps": Setting(44, f"{SQ}/run/whale.sh:16", "E = 0.6 epoch"),
        "round_mh_iters": Setting(5, f"{SQ}/run/whale.sh:17", "proposing iterations per phase"),
        "harness_phase_i": Setting(6, f"{ALTERNATE}:16", _I_COUNTS_INCOMING),
        "mh_only_iterations": Setting(
            40, f"{SQ}/run/mh_only.sh:12", "proposing iterations, plus the h0 evaluation"
        ),
        "adaptive_round_steps": Setting(
            15, f"{SQ}/run/adaptive_whale.sh:17", _ADAPTIVE_WEIGHT_RULE
        ),
        "adaptive_mh_min_iters": Setting(5, f"{SQ}/run/adaptive_whale.sh:18"),
        "adaptive_mh_patience": Setting(2, f"{SQ}/run/adaptive_whale.sh:19"),
        "adaptive_mh_max_iters": Setting(15, f"{SQ}/run/adaptive_whale.sh:20"),
        "adaptive_max_rounds": Setting(30, f"{SQ}/run/adaptive_whale.sh:21"),
        "train_batch_size": Setting(
            64,
            f"{SQ_TRAIN}:176",
            "default chain: the launchers do not set TRAIN_BATCH_SIZE, so the script's default 64 "
            "applies (also data.train_batch_size 64 in search_multiturn_grpo.yaml:12). Math and "
            "chess use 256, and reproducing.md speaks of 'the shared prompt batch size of 256'",
        ),
        "rollout_n": Setting(8, f"{SQ_TRAIN}:174"),
        "sft_mini_batch_size": Setting(64, f"{ALTERNATE}:53", _SFT_FROM_ALTERNATE),
        "sft_micro_batch_size_per_gpu": Setting(2, f"{ALTERNATE}:54", _SFT_FROM_ALTERNATE),
        "sft_epochs": Setting(1, f"{ALTERNATE}:52", _SFT_FROM_ALTERNATE),
        "score_threshold": Setting(0.5, f"{ALTERNATE}:55", _THRESHOLD),
        "actor_lr": Setting(1e-6, f"{SQ_TRAIN}:374", "no warmup (line 375); 10x math and chess"),
        "weight_decay": Setting(0.01, f"{VERL_OPTIM}:21", _NO_OPTIM_OVERRIDE),
        "resume_mode": Setting(
            "disable",
            f"{SQ_TRAIN}:257",
            "ray_trainer._load_checkpoint returns step 0 at once when resume_mode is 'disable'",
        ),
        "optimizer_state_resumed": Setting(
            False,
            f"{SQ_TRAIN}:257",
            "nothing is resumed: with resume_mode=disable every weight phase that alternate.sh "
            "starts begins again from BASE_MODEL at step 0 (fresh optimizer, fresh dataloader, "
            "data.shuffle False in search_multiturn_grpo.yaml:17) and trains up to the cumulative "
            "target step under the current harness",
        ),
        "fine_tune": Setting("full", f"{VERL_MODEL}:43", _FULL_FINE_TUNE),
        "rollout_temperature": Setting(1.0, f"{SQ_TRAIN}:404"),
        "rollout_top_p": Setting(1.0, f"{SQ_TRAIN}:405"),
        "rollout_top_k": Setting(20, f"{SQ_TRAIN}:406"),
        "val_temperature": Setting(1.0, f"{SQ_TRAIN}:408"),
        "val_top_p": Setting(1.0, f"{SQ_TRAIN}:409"),
        "val_top_k": Setting(20, f"{SQ_TRAIN}:410"),
        "val_n": Setting(8, f"{SQ_TRAIN}:175", "mean@8; passed as val_kwargs.n at line 411"),
        "harness_eval_temperature": Setting(
            1.0,
            f"{SQ_TOML}:65",
            "the module's default config meta_harness/config-search-r1.json (meta_harness_search_"
            "r1.py:48) is not in the release, and the search-QA launchers pass no --config; the "
            "values here are from searchr1.toml, which scripts/run_meta_harness.py turns into that "
            "JSON",
        ),
        "harness_eval_top_p": Setting(1.0, f"{SQ_TOML}:66"),
        "harness_eval_top_k": Setting(20, f"{SQ_TOML}:67"),
        "harness_eval_samples_per_task": Setting(1, f"{SQ_TOML}:72"),
        "harness_eval_examples": Setting(
            256, f"{SQ_TOML}:63", "-1 = the whole eval parquet, a 256-row file"
        ),
        "harness_eval_max_turns": Setting(
            4,
            f"{SQ_TOML}:69",
            "while the base harness sets MAX_TURNS = 2 (base_harness.py:97)",
        ),
        "max_prompt_length": Setting(2048, f"{SQ_TRAIN}:186"),
        "max_response_length": Setting(
            10240,
            f"{SQ_TRAIN}:219",
            "data.max_response_length = MAX_RESP_LENGTH + 1024 x max turns = 8192 + 2 x 1024 "
            "(assistant and tool tokens together)",
        ),
        "max_model_len": Setting(32768, f"{SQ_TRAIN}:190", "same in searchr1.toml:28"),
        "max_turns": Setting(
            2,
            f"{SQ_HARNESS}:97",
            "the script reads MAX_TURNS from HARNESS_PATH (train script lines 193-208, capped at "
            "16; default 4 without a harness, line 192)",
        ),
        "assistant_token_budget": Setting(
            8192, f"{SQ_TRAIN}:185", "multi_turn.max_assistant_tokens (line 396); toml:68 too"
        ),
        "max_tool_response_length": Setting(
            99999,
            f"{SQ_TRAIN}:212",
            "verl truncation effectively off; the harness caps each passage at 200 tokens",
        ),
        "save_freq": Setting(7, f"{SQ_TRAIN}:250", "also at the last step of every phase"),
        "max_ckpt_to_keep": Setting(None, f"{SQ_TRAIN}:252", "null: keep every checkpoint"),
        "test_freq": Setting(
            7, f"{SQ_TRAIN}:251", "also before training (line 421) and at a phase's last step"
        ),
        "proposer_model": Setting("claude-opus-4-7", f"{ALTERNATE}:42", _PROPOSER_MODEL),
        "proposer_effort": Setting("max", f"{ALTERNATE}:43"),
        "proposer_timeout_s": Setting(2400, f"{ALTERNATE}:44", _PROPOSER_TIMEOUT),
        "proposals_per_iter": Setting(
            3, f"{ALTERNATE}:41", "one session writes all K; searchr1.toml:84 says 1 (unused)"
        ),
        "proposer_allowed_tools": Setting(
            ["Read", "Glob", "Grep", "Write", "Edit", "Bash"], f"{SQ_MH}:66"
        ),
        "proposer_has_bash": Setting(True, f"{SQ_MH}:66"),
        "skill_md_path": Setting(
            f"{SQ}/meta_harness/skills/meta-harness-search-r1/SKILL.md", f"{SQ_MH}:56"
        ),
        "train_set": Setting(
            "data/searchR1_processed/train_nq_single.parquet",
            f"{SQ_TRAIN}:254",
            "default chain: launchers do not set TRAIN_FILES. docs/data.md:37 says D_weight is the "
            "merged NQ + HotpotQA train file",
        ),
        "train_size": Setting(
            18946,
            f"{DATA_MD}:37",
            "per the docs (74 x 256); the script's default file is NQ only, 4,480 rows per its "
            "comment (train script line 122)",
        ),
        "harness_split": Setting(
            "data/searchR1_processed/train_meta_harness_nq_256.parquet",
            f"{SQ_TOML}:75",
            "builder default out, build_meta_harness_nq_256.py:64. docs/data.md:64 instead names "
            "mh_dist_align_256.parquet as D_harness; no release file builds that",
        ),
        "harness_split_size": Setting(256, f"{SQ_MH_DATA}:67"),
        "harness_split_draw": Setting(
            "128 pre-existing NQ rows (mh_nq_single_128.parquet) + 128 sampled from the NQ train "
            "set, NQ only",
            f"{SQ_MH_DATA}:5",
            "its docstring (lines 6-7) requires every row to come from the NQ training set: the "
            "harness split is NOT disjoint from D_weight, contrary to docs/data.md:3",
        ),
        "harness_split_seed": Setting(42, f"{SQ_MH_DATA}:65"),
        "test_sets": Setting(
            ["nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle"],
            f"{DATA_MD}:34",
            "the merged seven-dataset test file. Validation during training uses test_100.parquet "
            "(7 x 100 = 700 rows, train script line 256)",
        ),
        "reports_per_benchmark_and_average": Setting(True, f"{DATA_MD}:38"),
        "retriever_model": Setting("intfloat/e5-base-v2", f"{DATA_MD}:49"),
        "retriever_index": Setting(
            "flat FAISS index over wiki-18 (e5_Flat.index)", f"{DATA_MD}:49", "roughly 75 GB"
        ),
        "retriever_topk": Setting(
            1, f"{SQ_HARNESS}:70", "the harness forces top-1; the server's default is 3 (toml:54)"
        ),
        "passage_token_cap": Setting(
            200, f"{SQ_HARNESS}:38", "max_doc_tokens, truncated by the retrieval server"
        ),
        "query_writer": Setting(
            "the model",
            f"{SQ_HARNESS}:58",
            "the harness forwards the model's first query unchanged (extra queries dropped, "
            "lines 53-57); docs/data.md:117",
        ),
        "max_turns_clamp": Setting(
            16,
            f"{SQ_TRAIN}:203",
            "a harness's MAX_TURNS (resolve_harness_max_turns.py reads CandidateEnv.MAX_TURNS, "
            "importing the file, else its literal) is clamped to 16 (lines 203-205); each "
            "candidate's own value holds below it",
        ),
        "response_tokens_per_turn": Setting(
            1024,
            f"{SQ_TRAIN}:219",
            "MAX_TOTAL_RESPONSE_LENGTH = MAX_RESP_LENGTH + MAX_ASSISTANT_TURNS x 1024: the "
            "response window grows with the harness's turns",
        ),
        "trainer_gpus": Setting(
            6,
            f"{SQ_TRAIN}:172",
            "N_GPUS_PER_NODE on one node (the retriever holds GPUs 0-1); 8 with MULTI_RETRIEVE",
        ),
        "script_train_rows": Setting(
            4480,
            f"{SQ_TRAIN}:122",
            "the training script's own reading: 0.1 epoch = 7 steps for 4,480 NQ rows at 64",
        ),
        "val_set": Setting(
            "data/searchR1_processed/test_100.parquet",
            f"{SQ_TRAIN}:256",
            "the in-training test points (test_freq and before training): 7 benchmarks x 100 "
            "rows (the comment, line 255)",
        ),
        "val_rows_per_benchmark": Setting(100, f"{SQ_TRAIN}:255"),
        "final_test_excludes_val": Setting(
            True,
            f"{SQ_FINAL_TEST}:2",
            "the final test file is the source test minus the validation rows",
        ),
        "final_test_row_key": Setting(
            ("data_source", "index", "question", "target"),
            f"{SQ_FINAL_TEST}:24",
            "_row_key: extra_info.index and .question, reward_model.ground_truth.target",
        ),
    },
    "math": {
        "base_model": Setting("Qwen/Qwen3.5-2B", f"{MA}/run/whale.sh:13"),
        "starting_harness_whale": Setting(
            f"{MA}/environments/retool/base_harness.py", f"{MA}/run/whale.sh:12"
        ),
        "starting_harness_rsft_only": Setting(
            f"{MA}/environments/retool/base_harness.py", f"{MA}/run/rsft_only.sh:10"
        ),
        "starting_harness_mh_only": Setting(
            f"{MA}/environments/retool/base_harness.py", f"{MA}/run/mh_only.sh:10"
        ),
        "total_steps_whale": Setting(420, f"{MA}/run/whale.sh:15", "6 epochs at 70 steps"),
        "total_steps_rsft_only": Setting(420, f"{MA}/run/rsft_only.sh:12", "6 epochs at 70 steps"),
        "steps_per_epoch": Setting(
            70,
            f"{MA_EPOCHS}:85",
            "ceil(17,917 / 256); whale.sh:15 states it in a comment. The training script's own "
            "trainer.total_epochs default is 2 (line 257); the online-RSFT loop ignores epochs "
            "and runs to trainer.total_training_steps",
        ),
        "round_steps": Setting(42, f"{MA}/run/whale.sh:17", "E = 0.6 epoch"),
        "round_mh_iters": Setting(5, f"{MA}/run/whale.sh:18", "proposing iterations per phase"),
        "harness_phase_i": Setting(6, f"{ALTERNATE}:16", _I_COUNTS_INCOMING),
        "mh_only_iterations": Setting(
            60, f"{MA}/run/mh_only.sh:12", "proposing iterations, plus the h0 evaluation"
        ),
        "adaptive_round_steps": Setting(
            14, f"{MA}/run/adaptive_whale.sh:18", _ADAPTIVE_WEIGHT_RULE
        ),
        "adaptive_mh_min_iters": Setting(5, f"{MA}/run/adaptive_whale.sh:19"),
        "adaptive_mh_patience": Setting(2, f"{MA}/run/adaptive_whale.sh:20"),
        "adaptive_mh_max_iters": Setting(15, f"{MA}/run/adaptive_whale.sh:21"),
        "adaptive_max_rounds": Setting(30, f"{MA}/run/adaptive_whale.sh:22"),
        "train_batch_size": Setting(256, f"{MA_TRAIN}:176"),
        "rollout_n": Setting(8, f"{MA_TRAIN}:173"),
        "sft_mini_batch_size": Setting(64, f"{ALTERNATE}:53", _SFT_FROM_ALTERNATE),
        "sft_micro_batch_size_per_gpu": Setting(2, f"{ALTERNATE}:54", _SFT_FROM_ALTERNATE),
        "sft_epochs": Setting(1, f"{ALTERNATE}:52", _SFT_FROM_ALTERNATE),
        "score_threshold": Setting(0.5, f"{ALTERNATE}:55", _THRESHOLD),
        "actor_lr": Setting(1e-7, f"{MA_TRAIN}:227", "passed at line 401; no warmup (line 402)"),
        "weight_decay": Setting(0.01, f"{VERL_OPTIM}:21", _NO_OPTIM_OVERRIDE),
        "resume_mode": Setting("auto", f"{MA_TRAIN}:258"),
        "optimizer_state_resumed": Setting(
            True,
            f"{VERL_ACTOR}:101",
            "default chain: resume_mode auto (train script line 258) reloads the latest "
            "checkpoint in outputs/RUN_NAME, and the script leaves actor.checkpoint at verl's "
            "default save/load contents [model, optimizer, extra], so weights, AdamW state, lr "
            "scheduler and dataloader position carry across weight phases",
        ),
        "fine_tune": Setting("full", f"{VERL_MODEL}:43", _FULL_FINE_TUNE),
        "rollout_temperature": Setting(1.0, f"{MA_TRAIN}:248"),
        "rollout_top_p": Setting(1.0, f"{MA_TRAIN}:249"),
        "rollout_top_k": Setting(20, f"{MA_TRAIN}:250"),
        "val_temperature": Setting(1.0, f"{MA_TRAIN}:248", "val_kwargs reuse ROLLOUT_* (437-439)"),
        "val_top_p": Setting(1.0, f"{MA_TRAIN}:249"),
        "val_top_k": Setting(20, f"{MA_TRAIN}:250"),
        "val_n": Setting(8, f"{MA_TRAIN}:174", "mean@8; passed as val_kwargs.n at line 440"),
        "harness_eval_temperature": Setting(1.0, f"{MA_CONFIG}:25"),
        "harness_eval_top_p": Setting(1.0, f"{MA_CONFIG}:26"),
        "harness_eval_top_k": Setting(20, f"{MA_CONFIG}:27"),
        "harness_eval_samples_per_task": Setting(
            1,
            f"{MA_BENCH}",
            "no n in config-retool.json and run_sweep passes no rollout_n, so "
            "evaluate_harness_module's default rollout_n=1 applies (line not counted)",
        ),
        "harness_eval_examples": Setting(256, f"{MA_CONFIG}:23"),
        "harness_eval_max_turns": Setting(2, f"{MA_CONFIG}:29"),
        "max_prompt_length": Setting(2048, f"{MA_TRAIN}:182"),
        "max_response_length": Setting(
            8192,
            f"{MA_TRAIN}:206",
            "MAX_TOTAL_RESPONSE_LENGTH defaults to MAX_RESP_LENGTH (line 183); passed at 379",
        ),
        "max_model_len": Setting(32768, f"{MA_TRAIN}:184"),
        "max_turns": Setting(
            2, f"{MA_HARNESS}:105", "read from HARNESS_PATH (train script 199-204); default 2, 185"
        ),
        "assistant_token_budget": Setting(
            8192,
            f"{MA_TRAIN}:183",
            "max_assistant_tokens (line 429); RETOOL_ASSISTANT_TOKEN_BUDGET (line 225) is "
            "MAX_TOTAL_RESPONSE_LENGTH, also 8192; config-retool.json:28 max_tokens 8192",
        ),
        "max_tool_response_length": Setting(
            4096, f"{MA_TRAIN}:186", "sandbox: 30 s (line 132), 1024 MB (line 133)"
        ),
        "save_freq": Setting(
            7,
            f"{MA_TRAIN}:252",
            "'auto' = 0.1 epoch (line 254) = ceil(70 x 0.1) via resolve_epoch_steps.py:71",
        ),
        "max_ckpt_to_keep": Setting(None, f"{MA_TRAIN}:256", "null: keep every checkpoint"),
        "test_freq": Setting(7, f"{MA_TRAIN}:253", "'auto' = 0.1 epoch (line 255)"),
        "proposer_model": Setting("claude-opus-4-7", f"{ALTERNATE}:42", _PROPOSER_MODEL),
        "proposer_effort": Setting("max", f"{ALTERNATE}:43"),
        "proposer_timeout_s": Setting(2400, f"{ALTERNATE}:44", _PROPOSER_TIMEOUT),
        "proposals_per_iter": Setting(3, f"{ALTERNATE}:41", "config-retool.json:6 agrees"),
        "proposer_allowed_tools": Setting(
            ["Read", "Glob", "Grep", "Write", "Edit", "Bash"], f"{MA_MH}:66"
        ),
        "proposer_has_bash": Setting(True, f"{MA_MH}:66"),
        "skill_md_path": Setting(
            f"{MA}/meta_harness/skills/meta-harness-retool/SKILL.md", f"{MA_MH}:56"
        ),
        "train_set": Setting("data/retool/dapo_math_17k_dedup.parquet", f"{MA_TRAIN}:125"),
        "train_size": Setting(
            17917,
            f"{MA_TRAIN}:124",
            "DAPO-Math-17K de-duplicated (the HF split repeats it 100 times); docs/data.md:74",
        ),
        "harness_split": Setting(
            "data/retool/meta_harness_dapo17k_dedup_seed42_256.parquet",
            f"{DATA_MD}:75",
            "docs only: config-retool.json:24 leaves eval_dataset_path empty, so the default is "
            "decided by environments/retool/env.py, which is not in the release; no builder is "
            "released",
        ),
        "harness_split_size": Setting(256, f"{DATA_MD}:76", "config-retool.json:23 agrees"),
        "harness_split_draw": Setting(
            "sampled from the de-duplicated training pool",
            f"{DATA_MD}:76",
            "so it overlaps D_weight's pool",
        ),
        "harness_split_seed": Setting(42, f"{DATA_MD}:76"),
        "test_sets": Setting(
            ["yentinglin/aime_2025", "Maxwell-Jia/AIME_2024"],
            f"{MA_TRAIN}:126",
            "30 problems each (docs/data.md:77-78)",
        ),
        "dedup_size": Setting(17917, f"{DATA_MD}:74"),
        "max_turns_clamp": Setting(
            16, f"{MA_TRAIN}:200", "the harness's resolved MAX_TURNS, clamped to 16 (200-203)"
        ),
        "response_tokens_per_turn": Setting(
            0,
            f"{MA_TRAIN}:206",
            "MAX_TOTAL_RESPONSE_LENGTH defaults to MAX_RESP_LENGTH: no per-turn growth",
        ),
        "trainer_gpus": Setting(8, f"{MA_TRAIN}:169", "N_GPUS_PER_NODE x NNODES 1 (line 170)"),
    },
    "chess": {
        "base_model": Setting("Qwen/Qwen3.5-4B", f"{CH}/run/whale.sh:13"),
        "starting_harness_whale": Setting(
            f"{CH}/environments/chess_puzzle/base_harness.py", f"{CH}/run/whale.sh:12"
        ),
        "starting_harness_rsft_only": Setting(
            f"{CH}/environments/chess_puzzle/base_harness.py", f"{CH}/run/rsft_only.sh:10"
        ),
        "starting_harness_mh_only": Setting(
            f"{CH}/environments/chess_puzzle/base_harness.py",
            f"{CH}/run/mh_only.sh:10",
            "meta_harness_chess_puzzle.py reads BASELINE_HARNESS_OVERRIDE",
        ),
        "total_steps_whale": Setting(256, f"{CH}/run/whale.sh:15", "4 epochs at 64 steps"),
        "total_steps_rsft_only": Setting(256, f"{CH}/run/rsft_only.sh:12", "4 epochs at 64 steps"),
        "steps_per_epoch": Setting(
            64, f"{CH}/run/whale.sh:15", "a comment: 16,384 puzzles / 256 prompts"
        ),
        "round_steps": Setting(38, f"{CH}/run/whale.sh:17", "E = 0.6 epoch"),
        "round_mh_iters": Setting(5, f"{CH}/run/whale.sh:18", "proposing iterations per phase"),
        "harness_phase_i": Setting(6, f"{ALTERNATE}:16", _I_COUNTS_INCOMING),
        "mh_only_iterations": Setting(
            40, f"{CH}/run/mh_only.sh:12", "proposing iterations, plus the h0 evaluation"
        ),
        "adaptive_round_steps": Setting(
            13,
            f"{CH}/run/adaptive_whale.sh:18",
            _ADAPTIVE_WEIGHT_RULE + "; not part of the paper's results (reproducing.md)",
        ),
        "adaptive_mh_min_iters": Setting(5, f"{CH}/run/adaptive_whale.sh:19"),
        "adaptive_mh_patience": Setting(2, f"{CH}/run/adaptive_whale.sh:20"),
        "adaptive_mh_max_iters": Setting(15, f"{CH}/run/adaptive_whale.sh:21"),
        "adaptive_max_rounds": Setting(30, f"{CH}/run/adaptive_whale.sh:22"),
        "train_batch_size": Setting(256, f"{CH_TRAIN}:100"),
        "rollout_n": Setting(8, f"{CH_TRAIN}:97"),
        "sft_mini_batch_size": Setting(64, f"{ALTERNATE}:53", _SFT_FROM_ALTERNATE),
        "sft_micro_batch_size_per_gpu": Setting(
            2,
            f"{ALTERNATE}:54",
            "the chess script's own default is 1 (line 194) but it only applies with "
            "CHESS_PUZZLE_ALGO=rsft; alternate.sh passes 2",
        ),
        "sft_epochs": Setting(1, f"{ALTERNATE}:52", _SFT_FROM_ALTERNATE),
        "score_threshold": Setting(0.5, f"{ALTERNATE}:55", _THRESHOLD),
        "actor_lr": Setting(
            1e-7, f"{CH_TRAIN}:146", "grpo branch, the default algo; the rsft branch is also 1e-7"
        ),
        "weight_decay": Setting(0.01, f"{VERL_OPTIM}:21", _NO_OPTIM_OVERRIDE),
        "resume_mode": Setting("auto", f"{CH_TRAIN}:177"),
        "optimizer_state_resumed": Setting(
            False,
            f"{CH_TRAIN}:320",
            "checkpoint.save_contents and load_contents are [model, extra] (lines 320-321): "
            "weights and step resume across weight phases, the AdamW state starts fresh each phase",
        ),
        "fine_tune": Setting("full", f"{VERL_MODEL}:43", _FULL_FINE_TUNE),
        "rollout_temperature": Setting(1.0, f"{CH_TRAIN}:169"),
        "rollout_top_p": Setting(1.0, f"{CH_TRAIN}:170"),
        "rollout_top_k": Setting(20, f"{CH_TRAIN}:171"),
        "val_temperature": Setting(1.0, f"{CH_TRAIN}:169", "val_kwargs reuse ROLLOUT_* (354-356)"),
        "val_top_p": Setting(1.0, f"{CH_TRAIN}:170"),
        "val_top_k": Setting(20, f"{CH_TRAIN}:171"),
        "val_n": Setting(8, f"{CH_TRAIN}:98", "mean@8; passed as val_kwargs.n at line 357"),
        "harness_eval_temperature": Setting(1.0, f"{CH_CONFIG}:21"),
        "harness_eval_top_p": Setting(1.0, f"{CH_CONFIG}:22"),
        "harness_eval_top_k": Setting(20, f"{CH_CONFIG}:23"),
        "harness_eval_samples_per_task": Setting(
            1,
            f"{CH_CONFIG}:12",
            "one episode per puzzle: the config has no repeat count and chess_puzzle_benchmark."
            "run_sweep passes only limit=256 to evaluate_harness",
        ),
        "harness_eval_examples": Setting(256, f"{CH_CONFIG}:12"),
        "harness_eval_max_turns": Setting(9, f"{CH_CONFIG}:35", "cap 18 (line 37)"),
        "max_prompt_length": Setting(4096, f"{CH_TRAIN}:106"),
        "max_response_length": Setting(16384, f"{CH_TRAIN}:107"),
        "max_model_len": Setting(32768, f"{CH_TRAIN}:110"),
        "max_turns": Setting(
            9,
            f"{CH_HARNESS}:16",
            "the script derives it from the data with fallback 9 (lines 80-85, 111); cap 2x "
            "(line 112); format and illegal-move retry budgets 1 each (harness lines 14-15)",
        ),
        "assistant_token_budget": Setting(
            8129,
            f"{CH_TRAIN}:108",
            "8129, not 8192, consistently (config-chess-puzzle.json:24, 33-34)",
        ),
        "max_tool_response_length": Setting(
            None, f"{CH_TRAIN}", "no tool: the board observation is the environment's message"
        ),
        "save_freq": Setting(7, f"{CH_TRAIN}:173", "about 0.11 epoch at 64 steps an epoch"),
        "max_ckpt_to_keep": Setting(None, f"{CH_TRAIN}:175", "null: keep every checkpoint"),
        "test_freq": Setting(7, f"{CH_TRAIN}:174"),
        "proposer_model": Setting("claude-opus-4-7", f"{ALTERNATE}:42", _PROPOSER_MODEL),
        "proposer_effort": Setting("max", f"{ALTERNATE}:43"),
        "proposer_timeout_s": Setting(2400, f"{ALTERNATE}:44", _PROPOSER_TIMEOUT),
        "proposals_per_iter": Setting(3, f"{ALTERNATE}:41", "config-chess-puzzle.json:6 agrees"),
        "proposer_allowed_tools": Setting(
            ["Read", "Glob", "Grep", "Write", "Edit"],
            f"{CH_MH}:40",
            "no Bash, unlike search QA and math; an appended system prompt (lines 41-48) forbids "
            "shell commands and writes outside the run directory",
        ),
        "proposer_has_bash": Setting(False, f"{CH_MH}:40"),
        "skill_md_path": Setting(
            f"{CH}/meta_harness/skills/meta-harness-chess-puzzle/SKILL.md", f"{CH_MH}:30"
        ),
        "train_set": Setting(
            "data/chess_puzzle/lichess_puzzles_train_16384.parquet", f"{CH_TRAIN}:68"
        ),
        "train_size": Setting(16384, f"{CH_DATA}:166"),
        "harness_split": Setting(
            "data/chess_puzzle/lichess_puzzles_mh_val_256.parquet", f"{CH_CONFIG}:11"
        ),
        "harness_split_size": Setting(256, f"{CH_DATA}:168"),
        "harness_split_draw": Setting(
            "hash bucket of sha256(position_key + ':42'), buckets sized mh_val/test/train",
            f"{CH_DATA}:217",
            "bucketing in _split_for_key (line 124); disjoint from train and test by position",
        ),
        "harness_split_seed": Setting(42, f"{CH_DATA}:169"),
        "split_seed": Setting(42, f"{CH_DATA}:169", "DATA_SEED 42 for the dataloader too"),
        "dedup": Setting(
            "by position: start FEN piece placement + side to move",
            f"{CH_DATA}:215",
            "key built at line 40; Lichess/chess-puzzles streamed, 1-9 solution plies (173-174)",
        ),
        "test_pool_size": Setting(1024, f"{CH_DATA}:167"),
        "test_sets": Setting(
            ["data/chess_puzzle/lichess_puzzles_test_256.parquet"],
            f"{CH_TRAIN}:69",
            "the builder writes a 1,024-puzzle pool (test_1024); how the 256 test puzzles are "
            "drawn from it is not in the release (docs/data.md:109)",
        ),
        "max_turns_clamp": Setting(
            18, f"{CH_TRAIN}:112", "MAX_TURNS_CAP = 2 x DEFAULT_MAX_TURNS (9)"
        ),
        "response_tokens_per_turn": Setting(
            0, f"{CH_TRAIN}:107", "MAX_TOTAL_RESPONSE_LENGTH 16384 whatever the turns"
        ),
        "trainer_gpus": Setting(
            4,
            f"{CH_TRAIN}:88",
            "the trainer: 1 node (line 89) x 4 GPUs; the rollout servers run on 2 x 6 others",
        ),
        "proposer_system_prompt": Setting(
            "You are generating chess-puzzle-v0 Meta-Harness candidates inside one run "
            "directory. Do not run shell commands. Do not write to /tmp or to any absolute path "
            "outside the current working directory. The only files you may write are "
            "harnesses/<slot>/harness.py, pending_eval.json at the working-directory root, and "
            "optional logs/iteration_*/report.md summaries. The harness must never reveal or "
            "infer hidden puzzle solutions.",
            f"{CH_MH}:41",
            "passed as claude_wrapper.run(system_prompt=...) in propose_claude; search QA and math "
            "pass none",
        ),
    },
}
