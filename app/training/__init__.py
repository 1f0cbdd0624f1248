"""The weight phase: online rejection-sampling fine-tuning (RFT). docs/layout.md says what each
module here is."""
