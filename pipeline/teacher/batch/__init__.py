"""The Batch API teacher: a stage's requests sent through /v1/files and /v1/batches at the
providers' batch price, built on the same journal as the live teacher (see teacher.py)."""
