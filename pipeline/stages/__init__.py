"""The stages: each a function from its inputs and options to records, rejects and counts."""
