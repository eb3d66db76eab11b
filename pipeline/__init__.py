"""skillsft's library: stage logic and the teacher layer. Never imports luigi (see tasks/)."""
