"""Write experiments/paper/<domain>-<strategy>.toml: the paper's three domains under each
strategy it compares (WHALE and the weight-only, harness-only, stagewise and Fast-Slow Training
baselines), with the paper's settings (arXiv 2609.00196; release krafton-ai/WHALE). One table
here, so the fifteen files cannot drift apart; tests/loop/test_experiment.py checks that the shipped files are this
script's output. Run: python scripts/make_paper_experiments.py
"""

from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "experiments" / "paper"

# Per domain: the model, the RFT learning rate, the train prompts (for 0.6 epoch at 256 prompts
# per step), the data the full run reads, and the rollout budget the strategies share.
DOMAINS = {
    "searchqa": {
        "title": "search QA",
        "model": "Qwen/Qwen3.5-2B",
        "lr": "1e-6",
        "train": 18_946,
        "data": "WHALE_SEARCHQA_TRAIN, _TEST, _CORPUS and the dense retriever (README, searchqa)",
        # the paper's accounting for its search-QA WHALE run: ~606k weight + ~25k harness
        "rollouts": 631_000,
        "rollout": "",
    },
    "math": {
        "title": "math",
        "model": "Qwen/Qwen3.5-2B",
        "lr": "1e-7",
        "train": 17_917,
        "data": "WHALE_MATH_TRAIN (DAPO-Math-17K) and WHALE_MATH_TEST (AIME 2024 + 2025) (README, math)",
        "rollouts": 631_000,  # not stated for math: the search-QA figure, so runs compare alike
        "rollout": "",
    },
    "chess": {
        "title": "chess puzzles",
        "model": "Qwen/Qwen3.5-4B",
        "lr": "1e-7",
        "train": 16_384,
        "data": "WHALE_CHESS_PUZZLES, the Lichess puzzle database (README, chess)",
        "rollouts": 631_000,  # not stated for chess: the search-QA figure, so runs compare alike
        "rollout": """
[rollout]
max_calls = 9               # the release's turn limit, retries included
max_completion_tokens = 8129  # the release's assistant-token budget (sic)
max_tokens_per_call = 8129
""",
    },
}

PROMPTS_PER_STEP = 256
ROLLOUTS_PER_ITERATION = 3 * 256  # K = 3 candidates on 256 harness tasks, one rollout each
HARNESS_ONLY_ITERATIONS = 60  # the paper's harness-only baseline runs 40-60 iterations

STRATEGIES = {
    "whale": "WHALE: weight and harness phases alternate (E = 0.6 epoch, I = 6)",
    "weight-only": "the weight-only baseline: RFT alone under the seed harness",
    "harness-only": "the harness-only baseline: Meta-Harness search alone under the base model",
    "stagewise": "the stagewise baseline: every weight step first, then all harness search",
    "fast-slow": "the Fast-Slow Training baseline: RFT interleaved with GEPA-style prompt evolution",
}


SEARCH = {
    False: """proposer = "agent"          # the paper's: Claude Code reading the run's archive
candidates = 3
tasks = 256
samples = 1

[search.agent]
preset = "claude-code"      # needs `claude` on the PATH and ANTHROPIC_API_KEY
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


def experiment(domain: str, strategy: str) -> str:
    d = DOMAINS[domain]
    steps = round(0.6 * d["train"] / PROMPTS_PER_STEP)
    harness_only = strategy == "harness-only"
    rollouts = HARNESS_ONLY_ITERATIONS * ROLLOUTS_PER_ITERATION if harness_only else d["rollouts"]
    budget_note = (
        f"{HARNESS_ONLY_ITERATIONS} iterations of K = 3 on 256 tasks"
        if harness_only
        else "shared by the strategies of this domain"
    )
    ends = {
        "whale": 'end_on = "weight"           # the paper\'s runs end on a weight phase\n',
        "stagewise": 'end_on = "weight"\n',
        "fast-slow": 'end_on = "weight"\n',
    }.get(strategy, "")
    extra = "stagewise_weight_share = 0.96   # the WHALE run's weight share (~606k of ~631k)\n"
    return f"""\
# {d["title"]}, {STRATEGIES[strategy]}.
# The paper's settings (arXiv 2609.00196; release krafton-ai/WHALE): {d["model"]} on vLLM
# with thinking, full fine-tune at lr {d["lr"]}, 256 prompts x 8 rollouts per RFT step, test
# mean@8, the release's verifier.
# Data: {d["data"]}.
# Written by scripts/make_paper_experiments.py; the README's "Reproducing the paper" table says
# where the workbench still differs from the paper.
name = "paper-{domain}-{strategy}"
domain = "{domain}"
strategy = "{strategy.replace("-", "_")}"
scoring = "paper"
seed = 0
{extra if strategy == "stagewise" else ""}
[switching]
rule = "fixed"
weight_steps = {steps}           # 0.6 epoch of {d["train"]:,} prompts at 256 per step
harness_iterations = 6
{ends}
[rft]
prompts_per_step = {PROMPTS_PER_STEP}
samples_per_prompt = 8
temperature = 1.0
threshold = 0.5
lr = {d["lr"]}
lora = false
batch_size = 64
epochs = 1
max_seq_len = 8192          # = --max-model-len (the default: the rollout's token budget)

[search]
{SEARCH[strategy == "fast-slow"]}
[test]
k = 8

[sampling]
temperature = 1.0
top_k = 20
chat_template_kwargs = {{enable_thinking = true}}
{d["rollout"]}
[budget]
rollouts = {rollouts}       # {budget_note}

[runtime]
backend = "vllm"
llm_model = "{d["model"]}"
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
