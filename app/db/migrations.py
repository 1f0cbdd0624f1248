"""Forward-only migrations, applied in order and recorded in the `migration` table.

Never edit a migration that has shipped: append a new one.
"""

import math
import sqlite3

MIGRATIONS: list[tuple[str, str]] = [
    (
        "001_initial",
        """
        CREATE TABLE run (
            id INTEGER PRIMARY KEY, name TEXT NOT NULL, kind TEXT NOT NULL, domain TEXT NOT NULL,
            status TEXT NOT NULL, config BLOB, created_at DATETIME NOT NULL, finished_at DATETIME);
        CREATE TABLE harness (
            id INTEGER PRIMARY KEY, run_id INTEGER REFERENCES run(id),
            parent_id INTEGER REFERENCES harness(id), name TEXT NOT NULL, code TEXT NOT NULL,
            sha TEXT NOT NULL, hypothesis TEXT, proposer TEXT NOT NULL, valid BOOLEAN NOT NULL,
            error TEXT, created_at DATETIME NOT NULL);
        CREATE INDEX ix_harness_run_id ON harness(run_id);
        CREATE INDEX ix_harness_sha ON harness(sha);
        CREATE TABLE checkpoint (
            id INTEGER PRIMARY KEY, run_id INTEGER REFERENCES run(id),
            parent_id INTEGER REFERENCES checkpoint(id), kind TEXT NOT NULL, name TEXT NOT NULL,
            path TEXT, created_at DATETIME NOT NULL);
        CREATE TABLE evaluation (
            id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES run(id),
            harness_id INTEGER NOT NULL REFERENCES harness(id),
            checkpoint_id INTEGER NOT NULL REFERENCES checkpoint(id),
            split TEXT NOT NULL, k INTEGER NOT NULL, n_tasks INTEGER NOT NULL, status TEXT NOT NULL,
            mean_at_k FLOAT, mean_turns FLOAT, total_tokens INTEGER, n_done INTEGER NOT NULL,
            created_at DATETIME NOT NULL, finished_at DATETIME);
        CREATE INDEX ix_evaluation_run_id ON evaluation(run_id);
        CREATE TABLE rollout (
            id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES run(id),
            evaluation_id INTEGER NOT NULL REFERENCES evaluation(id),
            harness_id INTEGER NOT NULL REFERENCES harness(id),
            checkpoint_id INTEGER NOT NULL REFERENCES checkpoint(id),
            task_id TEXT NOT NULL, sample INTEGER NOT NULL, task BLOB, gold TEXT,
            status TEXT NOT NULL, reason TEXT, error TEXT, answer TEXT, reward FLOAT,
            turns INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL,
            completion_tokens INTEGER NOT NULL, wall_s FLOAT, stdout_tail TEXT, stderr_tail TEXT,
            created_at DATETIME NOT NULL, finished_at DATETIME);
        -- the trace list filters by run and status and pages by id
        CREATE INDEX ix_rollout_run_status ON rollout(run_id, status, id);
        CREATE INDEX ix_rollout_evaluation ON rollout(evaluation_id, id);
        CREATE TABLE step (
            id INTEGER PRIMARY KEY, rollout_id INTEGER NOT NULL REFERENCES rollout(id),
            idx INTEGER NOT NULL, kind TEXT NOT NULL, tool TEXT, request BLOB, response BLOB,
            error TEXT, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
            latency_ms FLOAT NOT NULL, created_at DATETIME NOT NULL);
        CREATE INDEX ix_step_rollout ON step(rollout_id, idx);
        CREATE TABLE event (
            id INTEGER PRIMARY KEY, run_id INTEGER REFERENCES run(id), kind TEXT NOT NULL,
            detail BLOB, created_at DATETIME NOT NULL);
        CREATE INDEX ix_event_run ON event(run_id, id);
        """,
    ),
    (
        "002_training",
        """
        CREATE TABLE training_job (
            id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES run(id),
            harness_id INTEGER NOT NULL REFERENCES harness(id),
            checkpoint_in_id INTEGER NOT NULL REFERENCES checkpoint(id),
            checkpoint_out_id INTEGER REFERENCES checkpoint(id),
            evaluation_id INTEGER REFERENCES evaluation(id),
            step INTEGER NOT NULL, status TEXT NOT NULL, config BLOB,
            n_rollouts INTEGER NOT NULL, n_accepted INTEGER NOT NULL, mean_reward FLOAT,
            n_examples INTEGER NOT NULL, tokens_trained INTEGER NOT NULL, loss FLOAT,
            error TEXT, log_tail TEXT, created_at DATETIME NOT NULL, finished_at DATETIME);
        CREATE INDEX ix_training_job_run ON training_job(run_id, id);
        CREATE TABLE metric (
            id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES run(id),
            training_job_id INTEGER REFERENCES training_job(id), series TEXT NOT NULL,
            x FLOAT NOT NULL, rollouts INTEGER NOT NULL, y FLOAT NOT NULL,
            created_at DATETIME NOT NULL);
        CREATE INDEX ix_metric_run_series ON metric(run_id, series, x);
        ALTER TABLE checkpoint ADD COLUMN training_job_id INTEGER REFERENCES training_job(id);
        ALTER TABLE checkpoint ADD COLUMN size_bytes INTEGER;
        -- a run's rollouts in id order without a status filter
        CREATE INDEX ix_rollout_run ON rollout(run_id, id);
        """,
    ),
    (
        "003_search",
        """
        -- one weight or harness phase of a run; the loop's state lives here
        CREATE TABLE phase (
            id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES run(id),
            kind TEXT NOT NULL, round INTEGER NOT NULL, status TEXT NOT NULL, ended_reason TEXT,
            harness_in_id INTEGER REFERENCES harness(id),
            harness_out_id INTEGER REFERENCES harness(id),
            checkpoint_in_id INTEGER REFERENCES checkpoint(id),
            checkpoint_out_id INTEGER REFERENCES checkpoint(id),
            rollouts INTEGER NOT NULL, detail BLOB, created_at DATETIME NOT NULL,
            finished_at DATETIME);
        CREATE INDEX ix_phase_run ON phase(run_id, id);
        CREATE TABLE search_iteration (
            id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES run(id),
            phase_id INTEGER NOT NULL REFERENCES phase(id), iteration INTEGER NOT NULL,
            proposer TEXT NOT NULL, status TEXT NOT NULL, error TEXT,
            n_candidates INTEGER NOT NULL, n_valid INTEGER NOT NULL,
            best_harness_id INTEGER REFERENCES harness(id),
            accepted_harness_id INTEGER REFERENCES harness(id), best_success FLOAT,
            frontier BLOB, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
            cost_usd FLOAT, proposer_wall_s FLOAT, wall_s FLOAT, report TEXT,
            created_at DATETIME NOT NULL, finished_at DATETIME);
        CREATE INDEX ix_search_iteration_phase ON search_iteration(phase_id, iteration);
        ALTER TABLE harness ADD COLUMN phase_id INTEGER REFERENCES phase(id);
        ALTER TABLE harness ADD COLUMN iteration INTEGER;
        ALTER TABLE harness ADD COLUMN axis TEXT;
        ALTER TABLE harness ADD COLUMN changes TEXT;
        ALTER TABLE harness ADD COLUMN parent_ids BLOB;
        ALTER TABLE evaluation ADD COLUMN phase_id INTEGER REFERENCES phase(id);
        CREATE INDEX ix_evaluation_harness ON evaluation(harness_id, checkpoint_id, split);
        """,
    ),
    (
        "004_loop",
        """
        -- what the user asked of a run (running | paused | stopped) and a one-shot action
        -- (skip, force, promote) waiting for the loop to take it
        ALTER TABLE run ADD COLUMN desired TEXT;
        ALTER TABLE run ADD COLUMN command BLOB;
        ALTER TABLE run ADD COLUMN strategy TEXT;
        ALTER TABLE training_job ADD COLUMN phase_id INTEGER REFERENCES phase(id);
        -- a test point names its evaluation (written once) and every x a curve may use
        ALTER TABLE metric ADD COLUMN evaluation_id INTEGER REFERENCES evaluation(id);
        ALTER TABLE metric ADD COLUMN weight_steps INTEGER;
        ALTER TABLE metric ADD COLUMN wall_s FLOAT;
        CREATE INDEX ix_training_job_phase ON training_job(phase_id, step);
        CREATE INDEX ix_evaluation_phase ON evaluation(phase_id, split);
        """,
    ),
    (
        "005_trace_browser",
        """
        -- the trace browser pages by id after each filter (keyset paging): every filter walks
        -- its own index in id order, so a page reads about one page of rows at any table size
        CREATE INDEX ix_rollout_status ON rollout(status, id);
        CREATE INDEX ix_rollout_harness ON rollout(harness_id, id);
        CREATE INDEX ix_rollout_checkpoint ON rollout(checkpoint_id, id);
        CREATE INDEX ix_rollout_task ON rollout(task_id, id);
        -- "fails under A, passes under B" counts a harness's (or checkpoint's) rollouts per task
        -- and status from the index alone
        CREATE INDEX ix_rollout_harness_task ON rollout(harness_id, task_id, status);
        CREATE INDEX ix_rollout_checkpoint_task ON rollout(checkpoint_id, task_id, status);
        """,
    ),
    (
        "006_generation",
        """
        -- what every model call of the evaluation ran under: sampling defaults, forced fields,
        -- the rollout budgets and the backend (app/llm/generation.py)
        ALTER TABLE evaluation ADD COLUMN generation BLOB;
        """,
    ),
    (
        "007_training_steps",
        """
        -- examples cut to max_seq_len, and those with nothing left to train, per RFT step
        ALTER TABLE training_job ADD COLUMN n_truncated INTEGER;
        ALTER TABLE training_job ADD COLUMN n_dropped INTEGER;
        ALTER TABLE training_job ADD COLUMN max_seq_len INTEGER;
        -- whether the step continued its phase's optimizer ([rft] optimizer_state = "phase")
        ALTER TABLE training_job ADD COLUMN optimizer_carried BOOLEAN;
        """,
    ),
    (
        "008_rollout_clock",
        """
        -- a rollout's wall time split into the harness's own time and the wait on its model and
        -- tool calls; when it was admitted; how many tries infrastructure failures took
        ALTER TABLE rollout ADD COLUMN harness_s FLOAT;
        ALTER TABLE rollout ADD COLUMN model_wait_s FLOAT;
        ALTER TABLE rollout ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
        ALTER TABLE rollout ADD COLUMN started_at DATETIME;
        -- rollouts left out of mean@k as infrastructure failures
        ALTER TABLE evaluation ADD COLUMN n_infra INTEGER NOT NULL DEFAULT 0;
        """,
    ),
    (
        "009_scoring",
        """
        -- the verifier's mode each evaluation was scored by (lenient, paper, ...)
        ALTER TABLE evaluation ADD COLUMN scoring TEXT;
        """,
    ),
    (
        "010_intervals",
        """
        -- the 95% interval of mean@k, resampling tasks (app/stats.py); evaluations finished
        -- before this migration have none
        ALTER TABLE evaluation ADD COLUMN ci_low FLOAT;
        ALTER TABLE evaluation ADD COLUMN ci_high FLOAT;
        """,
    ),
    (
        "011_commit_gate",
        """
        -- the commit gate's decision on each candidate of a search iteration (JSON)
        ALTER TABLE search_iteration ADD COLUMN gate BLOB;
        """,
    ),
    (
        "012_checkpoint_retention",
        """
        -- when retention ([rft] keep_last, keep_every, max_disk_gb) deleted a checkpoint's
        -- weights; its row stays, with the rows that refer to it
        ALTER TABLE checkpoint ADD COLUMN weights_dropped_at DATETIME;
        -- an RFT step's seconds per part: sampling, scoring, training, saving, weight sync (JSON)
        ALTER TABLE training_job ADD COLUMN timings BLOB;
        """,
    ),
    (
        "013_exact_intervals",
        """
        -- the 95% interval of mean@k is exact over the tasks (app/stats.py). The
        -- resampled one it replaces collapsed to a point when every task scored the same:
        -- where every task failed or passed, the exact interval of n tasks takes its place
        -- (Clopper-Pearson: 1 - 0.025^(1/n) from the end); where all scored the same in
        -- between, none is shown
        UPDATE evaluation SET ci_high = 1 - power(0.025, 1.0 / n_tasks)
            WHERE ci_low = ci_high AND mean_at_k = 0 AND n_tasks > 0;
        UPDATE evaluation SET ci_low = power(0.025, 1.0 / n_tasks)
            WHERE ci_low = ci_high AND mean_at_k = 1 AND n_tasks > 0;
        UPDATE evaluation SET ci_low = NULL, ci_high = NULL WHERE ci_low = ci_high;
        """,
    ),
    (
        "014_sampled_token_ids",
        """
        -- each model call's prompt and completion token ids as the server returned
        -- them (packed, compressed: app/db/steps.py), which RFT trains on
        ALTER TABLE step ADD COLUMN token_ids BLOB;
        -- per RFT step: examples trained from sampled ids, examples rendered, and the calls
        -- with ids whose rendering would have given other ids (drift) of those checked
        ALTER TABLE training_job ADD COLUMN n_from_ids INTEGER;
        ALTER TABLE training_job ADD COLUMN n_rendered INTEGER;
        ALTER TABLE training_job ADD COLUMN n_drift INTEGER;
        ALTER TABLE training_job ADD COLUMN n_drift_checked INTEGER;
        """,
    ),
    (
        "015_annotations",
        """
        -- tags, notes and labels: what people write on runs and rollouts. Their own
        -- tables, never the loop's rows, so a user's edit and the loop's writes never meet.
        -- The tag and label indexes serve the filters (runs by tag, rollouts by label)
        CREATE TABLE run_tag (
            run_id INTEGER NOT NULL REFERENCES run(id), tag TEXT NOT NULL,
            created_at DATETIME NOT NULL, PRIMARY KEY (run_id, tag));
        CREATE INDEX ix_run_tag_tag ON run_tag(tag, run_id);
        CREATE TABLE run_note (
            run_id INTEGER PRIMARY KEY REFERENCES run(id), text TEXT NOT NULL,
            updated_at DATETIME NOT NULL);
        CREATE TABLE rollout_label (
            rollout_id INTEGER NOT NULL REFERENCES rollout(id), label TEXT NOT NULL,
            created_at DATETIME NOT NULL, PRIMARY KEY (rollout_id, label));
        CREATE INDEX ix_rollout_label_label ON rollout_label(label, rollout_id);
        CREATE TABLE rollout_note (
            rollout_id INTEGER PRIMARY KEY REFERENCES rollout(id), text TEXT NOT NULL,
            updated_at DATETIME NOT NULL);
        """,
    ),
    (
        # forking a run from a phase boundary (app/loop/fork.py)
        "016_run_fork",
        """
        -- a run forked from another: its parent and the phase after which it branched
        -- (0: the parent's start); the fork point's harness, checkpoint and spending are in
        -- the run's config ("fork")
        ALTER TABLE run ADD COLUMN parent_run_id INTEGER REFERENCES run(id);
        ALTER TABLE run ADD COLUMN fork_phase INTEGER;
        """,
    ),
]


def migrate(conn: sqlite3.Connection) -> list[str]:
    """Apply the migrations this database lacks; return their names."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS migration (name TEXT PRIMARY KEY, applied_at DATETIME NOT NULL)"
    )
    conn.create_function("power", 2, math.pow, deterministic=True)  # not in every SQLite build
    done = {name for (name,) in conn.execute("SELECT name FROM migration")}
    applied = []
    for name, sql in MIGRATIONS:
        if name in done:
            continue
        # executescript commits first; wrap the migration and its record in one transaction
        conn.executescript(
            f"BEGIN;\n{sql}\nINSERT INTO migration VALUES ('{name}', datetime('now'));\nCOMMIT;"
        )
        applied.append(name)
    return applied
