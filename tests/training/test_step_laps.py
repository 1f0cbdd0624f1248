"""Where an RFT step's time goes (its job page's timings), the step's clock by itself: laps add
to what a resumed job recorded, and the trainer's own clock splits the training lap."""

from app.training.rft import StepLaps


def test_laps_add_to_what_a_resumed_job_recorded():
    laps = StepLaps({"sampling_s": 2.0})
    laps.clock -= 1.5  # 1.5 s since the clock started
    laps.lap("sampling_s")
    laps.clock -= 0.25
    laps.lap("scoring_s")
    assert 3.5 <= laps.timings["sampling_s"] < 4.5  # a loaded machine may add a little
    assert 0.25 <= laps.timings["scoring_s"] < 1.25


def test_the_training_lap_is_split_into_startup_training_and_saving():
    laps = StepLaps({"saving_s": 1.0})
    laps.timings["training_s"] = 20.0  # the lap: every try, the last one's wall time 12 s
    laps.split_training({"wall_seconds": 12.0, "train_seconds": 7.0, "save_seconds": 3.0})
    # the try's 12 s: 7 training, 3 saving, 2 starting the process; failed tries are training
    assert laps.timings == {"training_s": 15.0, "saving_s": 4.0, "startup_s": 2.0}
    laps.split_training({"wall_seconds": 9.0, "train_seconds": 7.0, "save_seconds": 3.0})
    assert laps.timings["startup_s"] == 2.0  # never below nothing (a clock's jitter)
