"""The shape of each page's data, as /openapi.json documents the JSON API.

Each model names the keys its data function returns and what they hold. Rows copied from a
table (a run, a harness, a step) keep every column of app/db/schema.py, so they are typed as
objects here, and every model lets further keys through: the schema documents the data, it
never trims it (tests/web/test_page_data.py checks that the JSON holds all a page shows).
"""

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

Row = dict[str, Any]  # a table row: its columns as in app/db/schema.py, datetimes in UTC


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Point(Open):
    x: float
    y: float


class TestPoint(Point):
    low: float | None = Field(
        default=None, description="95% interval of y, exact over the tasks (app/stats.py)"
    )
    high: float | None = None
    evaluation_id: int | None = Field(default=None, description="what the point measured")
    harness_id: int | None = None
    checkpoint_id: int | None = None
    k: int | None = None
    split: str | None = None
    n_timeout: int | None = Field(default=None, description="its rollouts that timed out")
    n_error: int | None = Field(default=None, description="its rollouts that raised")
    n_infra: int | None = Field(default=None, description="its rollouts the infrastructure failed")
    n_tasks: int | None = Field(default=None, description="the tasks its evaluation scored")
    few_tasks: bool | None = Field(default=None, description="fewer than FEW_TASKS (30) tasks")


class PairedComparison(Open):
    """This run's final test mean@k minus the baseline's, on the test tasks both scored."""

    against: int = Field(description="the run compared with: the baseline (default the oldest)")
    design: str = Field(description="what the comparison rests on: shared tasks, runs, seeds")
    n_tasks: int
    difference: float
    low: float | None = Field(
        description="95% interval of the difference: the two scores' intervals combined with "
        "the tasks' correlation (app/stats.py)"
    )
    high: float | None
    p_value: float = Field(
        description="two-sided, no difference; the interval's inversion: below 0.05 exactly "
        "when the interval leaves out 0"
    )
    few_tasks: bool = Field(description="fewer than FEW_TASKS (30) shared tasks")
    b_better: int = Field(description="tasks where this run scores higher")
    a_better: int = Field(description="tasks where the baseline scores higher")


# -- runs ----------------------------------------------------------------------------------


class RunSummary(Open):
    """A run's row with its progress: the runs list shows one per run."""

    id: int
    name: str
    status: str
    n_evaluations: int
    best_test: float | None = Field(
        description="best mean@k of its finished test-split evaluations (other splits left out)"
    )
    best_test_ci: list[float] | None = Field(description="95% interval of best_test")
    best_test_evaluation_id: int | None
    n_rollouts: int
    n_done: int
    phase: str | None = Field(description="its latest phase, as 'weight phase 2'")
    shown_status: str = Field(
        description="status as its badge shows it: 'pausing' or 'stopping' while rollouts it "
        "started are still running"
    )
    rollouts_used: int = Field(description="rollouts its budget counts (test ones are not)")
    rollouts_left: int | None = Field(description="what its rollout budget leaves; None: no limit")
    live: bool = Field(default=False, description="it can still change (the list keeps polling)")
    tags: list[str] = Field(default=[], description="the tags people gave it")
    note_line: str | None = Field(default=None, description="its note's first line, if any")


class RunsList(Open):
    """The runs list's table as the /runs page polls it."""

    runs: list[RunSummary]
    ids: list[int] = Field(description="the runs ticked for comparing, kept ticked")
    tag: str | None = Field(default=None, description="the tag the list is filtered by")


class TagCount(Open):
    tag: str
    runs: int


class RunsPage(Open):
    runs: list[RunSummary]
    tag: str | None = Field(default=None, description="the tag the list is filtered by")
    tags: list[TagCount] = Field(default=[], description="every tag in use, with its runs")
    presets: dict[str, str] = Field(description="experiment files offered for a new run")
    preset: str | None = Field(
        default=None, description="the preset the start form shows picked; None: its own text"
    )
    experiment: str = Field(description="the experiment text the start form shows")
    error: str | None
    fork_from: str | None = Field(
        default=None, description='the fork point the start form shows ("RUN:PHASE"), if any'
    )


class ComparedRun(Open):
    id: int
    name: str
    strategy: str
    status: str
    domain: str = Field(description="the domain its test tasks come from")
    k: int | None = Field(description="the k of its test mean@k (its newest test point's)")
    ks: list[int] | None = Field(description="every k of its test points, when they mix several")
    scoring: str | None = Field(description="the verifier mode its test evaluations used")
    selected: float | None = Field(
        description="test mean@k of the pair chosen on the harness split (or the final point)"
    )
    selected_ci: list[float] | None
    selected_by: str | None = Field(description="harness split, or final point")
    rollouts_to_selected: int | None
    best: float | None = Field(description="the maximum over test points (chosen on test)")
    best_ci: list[float] | None = Field(
        description="95% interval of best, exact over the tasks (app/stats.py)"
    )
    rollouts_to_best: int | None
    final: float | None = Field(
        description="test mean@k of the pair the run ended with; None when that pair was not "
        "tested (never another pair's score)"
    )
    final_ci: list[float] | None
    final_evaluation_id: int | None
    selected_evaluation_id: int | None
    test_tasks: int | None = Field(description="the test tasks the final score rests on")
    few_tasks: bool = Field(description="test_tasks below FEW_TASKS (30): a rough guide")
    final_pair: Row = Field(
        description="{harness_id, checkpoint_id, tested}: the pair the run ended with (holds "
        "now, while it runs); ids None for a run without phases"
    )
    rollouts_used: int
    test_points: int
    paired: PairedComparison | None = Field(
        description="final test score against the baseline's; None for the baseline itself"
    )
    group: str | None = Field(description="its seed group (`whale run --seeds`), if any")
    seed: int | None = Field(description="its experiment's seed")


class SeedPairs(Open):
    """One seed group's selected test scores against another's, seed s against seed s."""

    against: str = Field(description="the baseline group")
    seeds: list[int]
    difference: float = Field(description="mean over seeds of this group's minus the baseline's")
    low: float | None = Field(
        description="95% t interval over seeds (two seeds or more), no narrower than the "
        "seeds' paired intervals over the test tasks"
    )
    high: float | None
    p_value: float | None = Field(description="paired t-test over seeds, agreeing with low/high")
    design: str


class SeedGroup(Open):
    """Runs of one experiment under several seeds, as mean and 95% t interval over seeds."""

    group: str
    strategy: str
    seeds: list[int | None] = Field(description="each run's seed, in the order of runs")
    n_seeds: int
    runs: list[int]
    selected_mean: float | None
    selected_ci: list[float] | None
    best_mean: float | None
    best_ci: list[float] | None
    final_mean: float | None
    final_ci: list[float] | None
    design: str
    vs_baseline: SeedPairs | None = Field(
        description="selected score minus the baseline group's, paired by seed; None for it"
    )


class SeedBandPoint(Open):
    x: float = Field(description="the seeds' mean x at this test point (aligned by position)")
    mean: float = Field(description="mean test mean@k over the seeds")
    low: float = Field(description="95% t interval over seeds")
    high: float


class SeedBand(Open):
    """A seed group's test curve: its mean over seeds at each test point, with a band."""

    group: str
    label: str = Field(description="its legend entry")
    band: str = Field(description="what the band is")
    n_seeds: int
    runs: list[int]
    curves: list[str] = Field(description="its runs' keys in curves")
    points: list[SeedBandPoint]


class ComparePage(Open):
    ids: list[int]
    x: str = Field(description="x axis: rollouts, weight_steps or wall_s")
    x_label: str
    baseline: int = Field(description="the run the others are paired with (default: the oldest)")
    runs: list[ComparedRun]
    groups: list[SeedGroup] = Field(description="the seed groups among the runs, aggregated")
    curves: dict[str, list[TestPoint]] = Field(description="test mean@k per run label")
    seed_bands: list[SeedBand] = Field(
        description="each seed group of two seeds or more as one curve, as the chart draws it"
    )
    notes: list[str] = Field(
        description="why the runs' mean@k are not one scale, if they are not: a note per "
        "difference in domain, k or scoring mode, naming each run's value"
    )
    config_diff: Row = Field(
        default={},
        description="the runs' experiment settings as dotted keys: run_ids, differs ([{key, "
        "values in run_ids' order, absent: the runs lacking the key}]), same ({key: value})",
    )


class Budget(Open):
    name: str = Field(description="rollouts, tokens, proposer_usd or wall_s")
    used: float
    limit: float | None
    left: float | None
    share: float | None


class ControlButton(Open):
    action: str
    kind: str | None
    label: str
    refused: str | None = Field(description="why the run would not take it now; None: it would")


class Waiting(Open):
    on: str = Field(description="model_server (down or given up) or start (nothing finished)")
    text: str
    why: str | None = Field(description="why, as the model server or its watcher said, if one did")
    since: datetime = Field(description="when the wait began (UTC)")


class Dashboard(Open):
    run: Row
    timeline: list[Row] = Field(description="phases in order, with rollouts used and share")
    budgets: list[Budget]
    activity: str | None = Field(description="what the run does now; None once finished")
    waiting: Waiting | None = Field(description="what holds the run up, since when; None: nothing")
    controls: list[ControlButton]
    events: list[Row] = Field(description="newest entries of the run's log, each with `text`")
    curves: dict[str, Any] = Field(description="test, harness_success and training series")
    baseline: Row | None
    warnings: list[str] = Field(
        description="settings that make the run's numbers mean less, and how the baseline's "
        "test mean@k is on another scale (domain, k, scoring), if it is"
    )


class ParetoPoint(Open):
    harness_id: int
    name: str
    iteration: int | None
    success: float = Field(description="harness-split mean@k under the phase's checkpoint")
    mean_turns: float = Field(description="mean model calls per rollout")
    incoming: bool = Field(description="the harness the phase started from")
    on_front: bool = Field(description="not dominated (success up, turns down)")
    chosen: bool


class Pareto(Open):
    """A harness phase's scored harnesses as success against mean turns."""

    points: list[ParetoPoint]
    front: list[int] = Field(description="harness ids on the Pareto front, fewest turns first")
    chosen_id: int | None = Field(description="the harness it handed on (or accepted so far)")
    final: bool = Field(description="the phase has ended: chosen_id is its pick")
    unscored: int = Field(description="candidates without a score (invalid, not yet evaluated)")


class HarnessPhase(Open):
    phase: Row
    incoming: Row | None = Field(description="the harness it started from, with its score")
    iterations: list[Row]
    candidates: list[Row] = Field(description="each with success, mean_turns, gate, accepted")
    pareto: Pareto
    best_success: list[Point] = Field(description="best frontier success per iteration")
    candidate_lines: list[Row] = Field(
        default=[],
        description="per scored candidate: {harness_id, name, incoming, accepted, points: [{x: "
        "iteration, y: success, low, high}]} from the iteration that proposed it through those "
        "after which it stayed on the frontier",
    )
    proposer_tokens: int
    proposer_cost_usd: float


class WeightPhase(Open):
    """One weight phase of a run: its RFT steps, the checkpoints they made, its accept rate."""

    phase: Row | None = Field(description="the phase row; None: the steps of `whale train`")
    jobs: list[Row] = Field(description="its RFT steps (training jobs), each with accept_rate")
    rollouts_used: int = Field(description="rollouts its steps sampled")
    n_accepted: int
    accept_rate: float | None = Field(description="accepted / sampled over its steps")
    checkpoint_in: Row | None = Field(description="the checkpoint it started from")
    checkpoints_made: list[Row] = Field(description="the checkpoints its steps wrote, in order")


class RunLive(Open):
    """The run page, and its polled part: all of it but the invariant checks (RunChecks)."""

    run: Row
    evaluations: list[Row]
    status_counts: dict[str, int]
    recent_failures: list[Row]
    weight_phases: list[WeightPhase] = Field(description="one per weight phase; empty: no RFT")
    harness_phases: list[HarnessPhase]
    final: Row | None = Field(description="harness and checkpoint it ended with, and their phase")
    dashboard: Dashboard
    choices: list[Row] = Field(description="runs offered as a baseline")
    view: Row = Field(description="the x axis and baseline shown")
    message: str | None = Field(description="what a control button just did")
    annotations: Row = Field(default={}, description="its `tags` and `note`, as people wrote them")


class RunChecks(Open):
    run_id: int
    broken: list[Row] = Field(description="invariants its records break (`whale check`)")


class LineagePage(Open):
    run: Row
    phases: list[Row]
    nodes: list[Row] = Field(description="harnesses: parents, phase, score, accepted")
    edges: list[Row]
    checkpoint_chain: list[Row]
    fork: Row | None = Field(
        default=None, description="a fork: the parent run and phase it branched from, and how"
    )


# -- harnesses, training jobs, checkpoints ----------------------------------------------------


class HarnessPage(Open):
    harness: Row = Field(description="the harness row, code included")
    parent: Row | None
    other_parents: list[Row]
    children: list[Row]
    phase: Row | None
    evaluations: list[Row]
    scores: Row = Field(description="mean@k per checkpoint (rows) and split (columns)")
    diff: Row | None = Field(description="side-by-side diff against the parent or `against`")
    pickable: list[Row] = Field(description="harnesses it can be diffed against, by run")
    full: bool
    turns: Row = Field(
        description="`declared`: its MAX_TURNS (None: none); `clamp`: its run's [rollout] "
        "max_calls (None: the process default); its rollouts get the smaller"
    )
    labels: list[Row] = Field(
        default=[], description="its rollouts labelled, per label: {label, rollouts}, most first"
    )


class TrainingJobPage(Open):
    job: Row
    mean_loss: float | None
    run: Row
    phase: Row | None = Field(
        default=None, description="its weight phase (kind, round); None: a `whale train` step"
    )
    harness: Row
    sampling_evaluation: Row | None
    loss_curve: list[Row]
    time_split: list[Row] = Field(
        default=[], description="seconds per part of the RFT step: sampling, scoring, ..."
    )
    tokens: Row | None = Field(
        default=None,
        description="what was trained: examples from the sampled token ids, examples rendered "
        "through the chat template (the server gave no ids), and drift: calls whose rendering "
        "gives other ids than were sampled, of those checked; None until the job has trained",
    )
    accepted_rollouts: list[Row]


class CheckpointPage(Open):
    checkpoint: Row
    training_job: Row | None
    lineage: list[Row]
    children: list[Row]
    mean_at_k_by_split: dict[str, Row]
    evaluations: list[Row]
    weights: Row = Field(
        default={}, description="whether its weights are on disk or retention dropped them"
    )
    download: Row = Field(
        default={},
        description="its weights folder as a tar: {url, name, files, bytes}, or {refused: why}",
    )


# -- rollouts and traces ----------------------------------------------------------------------


class RolloutsPage(Open):
    items: list[Row]
    page_size: int
    filters: Row
    next_after: int | None = Field(description="cursor of the next page")
    prev_before: int | None = Field(description="cursor of the previous page")
    has_more: bool
    search: Row | None = Field(description="progress of a text search over the traces")
    status_counts: dict[str, int] | None
    statuses: list[str]
    here: Row = Field(description="the filters as URL parameters (names resolved to ids)")
    of_run: Row | None = Field(
        default=None, description="the run every listed rollout belongs to, if the filters name one"
    )
    choices: dict[str, list[Row]] = Field(
        description="harnesses, checkpoints, phases and labels (with their rollouts) offered"
    )
    max_id: int


class ContrastPage(Open):
    query: Row
    tasks: list[Row] | None = Field(description="tasks failing under A, passing under B")
    paired: Row | None = Field(
        default=None,
        description="B's pass rate minus A's on every task both ran: difference, 95% interval "
        "and p_value (app/stats.py, `paired`), n_tasks, few_tasks",
    )
    choices: dict[str, list[Row]]


class Trace(Open):
    rollout: Row
    run: Row
    harness: Row
    checkpoint: Row
    evaluation: Row
    n_steps: int
    first_step: int | None
    last_step: int | None
    shown: list[tuple[int, int]] | None = Field(description="step ranges given; None: all")
    model_step_before: list[Row | None] = Field(
        description="per range, the model call before it (its messages are folded)"
    )
    steps: list[Row]
    account: Row = Field(
        default={},
        description="how the harness got its answer: the lines it printed (`printed`, the last "
        "ones of `n_printed`; none: it gave no account), its model calls and those whose "
        "completion holds the answer as written (`answer_in_steps`)",
    )
    annotations: Row = Field(
        default={}, description="its `labels` and `note`, as people wrote them on its trace page"
    )


class RolloutPage(Trace):
    compare_with: list[Row] = Field(description="the task's rollouts under other pairs")


class TraceComparePage(Open):
    a: Trace
    b: Trace
    same_task: bool
    warning: str | None
