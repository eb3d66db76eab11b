"""Skill-bank evolution (`skillsft evolve`): bounded, evidenced edits to an existing bank.

One round reads the memories of new rollouts and the current bank and goes through five steps,
one module each: `reflect` (the teacher proposes ADD / REVISE / RETIRE edits citing memory ids),
`merge` (similar edits merged hierarchically, conflicts on one id resolved), `select` (edits
checked, ranked by the distinct trajectories supporting them, at most `max_edits` kept),
`update` (the candidate bank: unchanged entries byte for byte, new ids `dyn_NNN`) and `gate`
(the user's evaluator decides whether the candidate replaces the bank). `rounds` knows the
`evolution/round-NNN/` folders; `propose` runs the first four steps as one stage function.
"""
