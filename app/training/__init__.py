"""The weight phase: online rejection-sampling fine-tuning (RFT).

examples.py  accepted rollouts -> (messages -> completion) examples, tokenized with loss masks
train.py     the training process: one pass over the examples, saves a checkpoint (run apart
             from the server so a crash or OOM there never takes the server down)
job.py       starts and supervises that process, relays its progress
rft.py       one RFT step end to end: sample, accept, train, register, hot-load
"""
