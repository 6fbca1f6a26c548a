"""Writing profiles to disk: atomic files, a lock, a journal for `hwtune revert`.

`apply_all(output_dir, profile, hardware)` (in `hwtune.apply.outputs`) is the entry point that
`hwtune apply`, the daemon and the tuner share. Submodules import only the standard library at
module level, so `from hwtune.paths import default_output_dir` stays cheap.
"""
