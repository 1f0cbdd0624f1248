-- The store's schema at migration 012_checkpoint_retention, frozen: tests/db/test_upgrade.py builds
-- old stores from this file, not from app/db/migrations.py, so an edit to an old
-- migration cannot change what an old store looked like.
CREATE TABLE run (
            id INTEGER PRIMARY KEY, name TEXT NOT NULL, kind TEXT NOT NULL, domain TEXT NOT NULL,
            status TEXT NOT NULL, config BLOB, created_at DATETIME NOT NULL, finished_at DATETIME, desired TEXT, command BLOB, strategy TEXT);
CREATE TABLE harness (
            id INTEGER PRIMARY KEY, run_id INTEGER REFERENCES run(id),
            parent_id INTEGER REFERENCES harness(id), name TEXT NOT NULL, code TEXT NOT NULL,
            sha TEXT NOT NULL, hypothesis TEXT, proposer TEXT NOT NULL, valid BOOLEAN NOT NULL,
            error TEXT, created_at DATETIME NOT NULL, phase_id INTEGER REFERENCES phase(id), iteration INTEGER, axis TEXT, changes TEXT, parent_ids BLOB);
CREATE INDEX ix_harness_run_id ON harness(run_id);
CREATE INDEX ix_harness_sha ON harness(sha);
CREATE TABLE checkpoint (
            id INTEGER PRIMARY KEY, run_id INTEGER REFERENCES run(id),
            parent_id INTEGER REFERENCES checkpoint(id), kind TEXT NOT NULL, name TEXT NOT NULL,
            path TEXT, created_at DATETIME NOT NULL, training_job_id INTEGER REFERENCES training_job(id), size_bytes INTEGER, weights_dropped_at DATETIME);
CREATE TABLE evaluation (
            id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES run(id),
            harness_id INTEGER NOT NULL REFERENCES harness(id),
            checkpoint_id INTEGER NOT NULL REFERENCES checkpoint(id),
            split TEXT NOT NULL, k INTEGER NOT NULL, n_tasks INTEGER NOT NULL, status TEXT NOT NULL,
            mean_at_k FLOAT, mean_turns FLOAT, total_tokens INTEGER, n_done INTEGER NOT NULL,
            created_at DATETIME NOT NULL, finished_at DATETIME, phase_id INTEGER REFERENCES phase(id), generation BLOB, n_infra INTEGER NOT NULL DEFAULT 0, scoring TEXT, ci_low FLOAT, ci_high FLOAT);
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
            created_at DATETIME NOT NULL, finished_at DATETIME, harness_s FLOAT, model_wait_s FLOAT, attempts INTEGER NOT NULL DEFAULT 0, started_at DATETIME);
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
CREATE TABLE training_job (
            id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES run(id),
            harness_id INTEGER NOT NULL REFERENCES harness(id),
            checkpoint_in_id INTEGER NOT NULL REFERENCES checkpoint(id),
            checkpoint_out_id INTEGER REFERENCES checkpoint(id),
            evaluation_id INTEGER REFERENCES evaluation(id),
            step INTEGER NOT NULL, status TEXT NOT NULL, config BLOB,
            n_rollouts INTEGER NOT NULL, n_accepted INTEGER NOT NULL, mean_reward FLOAT,
            n_examples INTEGER NOT NULL, tokens_trained INTEGER NOT NULL, loss FLOAT,
            error TEXT, log_tail TEXT, created_at DATETIME NOT NULL, finished_at DATETIME, phase_id INTEGER REFERENCES phase(id), n_truncated INTEGER, n_dropped INTEGER, max_seq_len INTEGER, optimizer_carried BOOLEAN, timings BLOB);
CREATE INDEX ix_training_job_run ON training_job(run_id, id);
CREATE TABLE metric (
            id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES run(id),
            training_job_id INTEGER REFERENCES training_job(id), series TEXT NOT NULL,
            x FLOAT NOT NULL, rollouts INTEGER NOT NULL, y FLOAT NOT NULL,
            created_at DATETIME NOT NULL, evaluation_id INTEGER REFERENCES evaluation(id), weight_steps INTEGER, wall_s FLOAT);
CREATE INDEX ix_metric_run_series ON metric(run_id, series, x);
CREATE INDEX ix_rollout_run ON rollout(run_id, id);
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
            created_at DATETIME NOT NULL, finished_at DATETIME, gate BLOB);
CREATE INDEX ix_search_iteration_phase ON search_iteration(phase_id, iteration);
CREATE INDEX ix_evaluation_harness ON evaluation(harness_id, checkpoint_id, split);
CREATE INDEX ix_training_job_phase ON training_job(phase_id, step);
CREATE INDEX ix_evaluation_phase ON evaluation(phase_id, split);
CREATE INDEX ix_rollout_status ON rollout(status, id);
CREATE INDEX ix_rollout_harness ON rollout(harness_id, id);
CREATE INDEX ix_rollout_checkpoint ON rollout(checkpoint_id, id);
CREATE INDEX ix_rollout_task ON rollout(task_id, id);
CREATE INDEX ix_rollout_harness_task ON rollout(harness_id, task_id, status);
CREATE INDEX ix_rollout_checkpoint_task ON rollout(checkpoint_id, task_id, status);
