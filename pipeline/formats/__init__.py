"""The files skillsft reads and writes: rollout text, records, conversations, corpus, card."""
