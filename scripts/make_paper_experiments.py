"""Write experiments/paper/<domain>-<strategy>.toml: the paper's three domains under each
strategy it compares (WHALE, its adaptive variant, and the weight-only, harness-only, stagewise
and Fast-Slow Training baselines), with the settings of the paper's release (arXiv 2609.00196;
krafton-ai/WHALE). One table here, so the files cannot drift apart; tests/loop/
test_experiment.py checks that the shipped files are this script's output, and
tests/loop/test_paper_experiments.py checks every setting against the release's values (with
the file and line of the release that sets each). Run: python scripts/make_paper_experiments.py

Lengths are in the release's units: RFT steps (its TOTAL_STEPS) and proposing iterations (its
ROUND_MH_ITERS, and ITERATIONS of its harness-only launcher), not a shared rollout budget;
`whale run FILE --dry-run` prints the rollouts they imply.
"""

import json
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "experiments" / "paper"

# The release's chess proposer's appended system prompt (meta_harness_chess_puzzle.py,
# PROPOSER_SYSTEM_PROMPT), with this workspace's files in place of its run directory's.
CHESS_PROPOSER_RULES = (
    "You are generating chess-puzzle harness candidates inside one workspace directory. Do not "
    "run shell commands. Do not write to /tmp or to any absolute path outside the current "
    "working directory. The only files you may write are candidates/<name>.py, "
    "candidates/<name>.json and reports/iteration-*.md. The harness must never reveal or "
    "infer hidden puzzle solutions."
)

# Per domain, as the release's launchers (domains/<d>/run/*.sh) and training scripts set them.
DOMAINS = {
    "searchqa": {
        "title": "search QA",
        "model": "Qwen/Qwen3.5-2B",
        "lr": "1e-6",
        # the docs' and launchers' reading: 18,946 NQ + HotpotQA questions at 256 prompts a
        # step, 74 steps an epoch (the training script's own default, 64 on 4,480 NQ rows, is
        # not what the paper describes; docs/paper.md says why)
        "prompts": 256,
        "total_steps": 296,  # 4 epochs at 74 steps (run/whale.sh, run/rsft_only.sh)
        "round_steps": 44,  # E = 0.6 epoch
        "adaptive_round_steps": 15,  # 0.2 epoch (run/adaptive_whale.sh)
        "harness_only_iterations": 40,  # run/mh_only.sh
        "prompt_len": 2048,
        "response_len": 8192,  # MAX_RESP_LENGTH, plus 1024 per turn of the harness's
        "per_turn": 1024,
        "turn_clamp": 16,  # a harness's MAX_TURNS, clamped at 16
        "assistant_tokens": 8192,
        # the release's search-QA script never resumes (RESUME_MODE=disable): each weight
        # phase starts a fresh optimizer (and, unlike here, the base weights)
        "optimizer": "phase",
        "allowed_tools": None,  # the preset's: Read, Glob, Grep, Write, Edit, Bash
        "data": (
            "WHALE_SEARCHQA_TRAIN (NQ + HotpotQA train, 18,946), _TEST (the seven benchmarks),\n"
            "#   _VAL (test_100, their 7 x 100 validation rows, which leave the test split),\n"
            "#   _HARNESS_BASE, _CORPUS (wiki-18), and the dense retriever:\n"
            "#   WHALE_SEARCHQA_RETRIEVER=dense, _DENSE_INDEX, _PASSAGE_TOKENIZER=Qwen/Qwen3.5-2B\n"
            "#   (docs/domains.md, searchqa)"
        ),
    },
    "math": {
        "title": "math",
        "model": "Qwen/Qwen3.5-2B",
        "lr": "1e-7",
        "prompts": 256,
        "total_steps": 420,  # 6 epochs at 70 steps
        "round_steps": 42,
        "adaptive_round_steps": 14,
        "harness_only_iterations": 60,
        "prompt_len": 2048,
        "response_len": 8192,  # MAX_TOTAL_RESPONSE_LENGTH = MAX_RESP_LENGTH, whatever the turns
        "per_turn": 0,
        "turn_clamp": 16,
        "assistant_tokens": 8192,
        "optimizer": "run",  # RESUME_MODE=auto with verl's default contents: AdamW carried over
        "allowed_tools": None,
        "data": "WHALE_MATH_TRAIN (DAPO-Math-17K) and WHALE_MATH_TEST (AIME 2024 + 2025) (docs/domains.md, math)",
    },
    "chess": {
        "title": "chess puzzles",
        "model": "Qwen/Qwen3.5-4B",
        "lr": "1e-7",
        "prompts": 256,
        "total_steps": 256,  # 4 epochs at 64 steps
        "round_steps": 38,
        "adaptive_round_steps": 13,
        "harness_only_iterations": 40,
        "prompt_len": 4096,
        "response_len": 16384,
        "per_turn": 0,
        "turn_clamp": 18,  # MAX_TURNS_CAP = 2 x the default 9 (retries included)
        "assistant_tokens": 8129,  # sic, everywhere in the release
        "optimizer": "phase",  # resumes the weights but saves no optimizer state
        # the chess proposer has no Bash and an appended system prompt
        # (meta_harness_chess_puzzle.py), its paths in this workspace's layout
        "allowed_tools": ["Read", "Glob", "Grep", "Write", "Edit"],
        "system_prompt": CHESS_PROPOSER_RULES,
        # the release's chess candidate is a restricted module over a fixed runner
        # (autoharness_chess_puzzle/runner.py): h0's `run` is that runner, kept as it is
        "fixed_functions": ["run"],
        "data": "WHALE_CHESS_PUZZLES=lichess_db_puzzle.csv.zst, the Lichess puzzle database (docs/domains.md, chess)",
    },
}
TEST_EVERY = 7  # the release tests (and saves) every 7 RFT steps, ~0.1 epoch

STRATEGIES = {
    "whale": "WHALE: weight and harness phases alternate (E = 0.6 epoch, I = 6), weights first",
    "whale-adaptive": "adaptive WHALE: each harness phase ends by patience, weight phases are 0.2 epoch",
    "weight-only": "the weight-only baseline: RFT alone under the starting harness",
    "harness-only": "the harness-only baseline: Meta-Harness search alone under the base model",
    "stagewise": "the stagewise baseline: every weight step first, then as much harness search as WHALE's",
    "fast-slow": "the Fast-Slow Training baseline: RFT interleaved with GEPA-style prompt evolution",
}
PROPOSING = 5  # ROUND_MH_ITERS: the release's I = 6 counts the incoming harness's evaluation


def _switching(d: dict, strategy: str) -> str:
    if strategy == "whale-adaptive":
        # run/adaptive_whale.sh: harness phases end by patience (min 5, patience 2, cap 15
        # proposing iterations); alternate.sh wires no weight-phase rule, so every weight phase
        # is its 0.2-epoch minimum, which the paper's rule (window = patience = minimum phase,
        # partial windows counted) would extend; here the rule runs as the paper states it
        n = d["adaptive_round_steps"]
        return f"""rule = "adaptive"
harness_min_iterations = 5
harness_patience = 2
harness_max_iterations = 15
weight_burn_in = {n}          # the minimum weight phase, 0.2 epoch
weight_window = {n}
weight_patience = {n}
weight_partial_windows = true
weight_max_steps = {d["total_steps"]}
"""
    iterations = d["harness_only_iterations"] if strategy == "harness-only" else PROPOSING
    return f"""rule = "fixed"
weight_steps_per_phase = {d["round_steps"]}           # E = 0.6 epoch (ROUND_STEPS)
proposing_iterations_per_phase = {iterations}     # after the incoming harness's evaluation: I = {iterations + 1}
"""


def _budget(d: dict, strategy: str) -> str:
    steps = f"weight_steps = {d['total_steps']}       # the release's TOTAL_STEPS"
    if strategy == "whale-adaptive":  # MAX_ROUNDS=30 cycles of a weight and a harness phase
        return f"{steps}\nmax_phases = 60\n"
    if strategy == "weight-only":
        return steps + "\n"
    if strategy == "harness-only":
        return (
            f"proposing_iterations = {d['harness_only_iterations']}   # run/mh_only.sh ITERATIONS\n"
        )
    if (
        strategy == "stagewise"
    ):  # WHALE's proposing iterations: one harness phase per weight phase but the last
        phases = -(-d["total_steps"] // d["round_steps"]) - 1
        return f"{steps}\nproposing_iterations = {phases * PROPOSING}   # as many as WHALE's\n"
    return steps + "\n"


SEARCH = {
    False: """proposer = "agent"          # the paper's: Claude Code reading the run's archive
workspace = "round"         # a fresh folder each harness phase, as the release's rounds
candidates = 3
tasks = 256
samples = 1
""",
    True: """proposer = "gepa"           # prompt-only: the seed's SYSTEM_PROMPT, parents from the per-task front
candidates = 3
tasks = 256
samples = 1

[search.llm]                # the reflection model; unset url: the policy itself on the run's vLLM
# url = "https://..."       # an OpenAI-compatible endpoint of a stronger model, with its
# model = "..."             # name and the api_key_env variable holding its key
max_tokens = 4096
""",
}


def _agent(d: dict) -> str:
    tools = d["allowed_tools"]
    line = f"\nallowed_tools = {tools!r}".replace("'", '"') if tools else ""
    if d.get("system_prompt"):
        line += f"\nsystem_prompt = {json.dumps(d['system_prompt'])}"
    return f"""
[search.agent]
preset = "claude-code"      # claude-opus-4-7, effort max, 2400 s (run/lib/alternate.sh); needs `claude` and ANTHROPIC_API_KEY{line}
"""


def _fixed(d: dict) -> str:
    names = d.get("fixed_functions")
    if not names:
        return ""
    listed = ", ".join(f'"{n}"' for n in names)
    return f"fixed_functions = [{listed}]   # candidates change the module around the runner\n"


def experiment(domain: str, strategy: str) -> str:
    d = DOMAINS[domain]
    fast_slow = strategy == "fast-slow"
    return f"""\
# {d["title"]}, {STRATEGIES[strategy]}.
# The release's settings (arXiv 2609.00196; krafton-ai/WHALE): {d["model"]} on vLLM with
# thinking, full fine-tune at lr {d["lr"]}, {d["prompts"]} prompts x 8 rollouts per RFT step, fixed
# decoding (temperature 1.0, top_p 1.0, top_k 20), test mean@8, the release's verifier.
# Data: {d["data"]}.
# Written by scripts/make_paper_experiments.py; the table of docs/paper.md says where the
# workbench still differs from the release.
name = "paper-{domain}-{strategy}"
domain = "{domain}"
harness = "harness_archive/paper/{domain}/h0.py"
strategy = "{strategy.removesuffix("-adaptive").replace("-", "_")}"
scoring = "paper"
seed = 0

[switching]
{_switching(d, strategy)}
[rft]
prompts_per_step = {d["prompts"]}
samples_per_prompt = 8
temperature = 1.0
threshold = 0.5
lr = {d["lr"]}
weight_decay = 0.01         # verl's AdamW default; the release sets none
lora = false
batch_size = 64             # SFT mini-batch of 64 accepted rollouts, each a whole sequence,
batch_unit = "rollout"
batch_scope = "rank"        # per data-parallel process, as verl's sft_mini_batch_size is
micro_batch_size = 2        # rows per forward pass on each process, for memory only (sft_micro_batch_size_per_gpu)
epochs = 1
optimizer_state = "{d["optimizer"]}"
max_seq_len = {d["prompt_len"] + d["response_len"]}        # prompt {d["prompt_len"]} + response {d["response_len"]}
max_seq_len_per_turn = {d["per_turn"]}     # {"plus 1024 per turn of the harness (MAX_RESP_LENGTH + 1024 x turns)" if d["per_turn"] else "the response window does not grow with turns"}
keep_every = {TEST_EVERY}              # weights of every 7th step, as the release saves (and those phases and tests use)
keep_last = 1

[search]
{_fixed(d)}{SEARCH[fast_slow]}{"" if fast_slow else _agent(d)}
[test]
k = 8
every_weight_steps = {TEST_EVERY}

[sampling]
override_harness = true     # every call, training, harness search and test alike
temperature = 1.0
top_p = 1.0
top_k = 20
chat_template_kwargs = {{enable_thinking = true}}

[rollout]
max_calls = {d["turn_clamp"]}               # the clamp: each harness's own MAX_TURNS holds below it
max_completion_tokens = {d["assistant_tokens"]}  # the release's cumulative assistant-token budget
max_tokens_per_call = {d["assistant_tokens"]}

[budget]
{_budget(d, strategy)}
[runtime]
backend = "vllm"
llm_model = "{d["model"]}"
vllm_max_model_len = 32768  # the release's vLLM
# Rollouts in flight: up to what the vLLM servers batch (max_num_seqs x replicas, read from
# them at start), so the {d["prompts"]} x 8 rollouts of an RFT step fill the GPU; `concurrency = N`
# here caps it (whale run --dry-run says the cap in force).
"""


def files() -> dict[str, str]:
    return {
        f"{domain}-{strategy}.toml": experiment(domain, strategy)
        for domain in DOMAINS
        for strategy in STRATEGIES
    }


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in files().items():
        (OUT / name).write_text(text)
        print(OUT / name)
