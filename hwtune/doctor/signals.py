"""What TensorFlow says about itself on the job's output (only where the doctor started it).

- `port.cc] oneDNN custom operations are on`: TF's oneDNN graph rewrites are enabled
  (TF_ENABLE_ONEDNN_OPTS; tensorflow/core/util/port.cc).
- `onednn_verbose,…,primitive,create:…`: oneDNN really built a primitive. The doctor sets
  ONEDNN_VERBOSE=profile_create (oneDNN 3.x, docs "Verbose Mode"), which prints one line per
  primitive creation (not per execution) on stdout, then drops those lines from what it passes on.
- `Compiled cluster using XLA!`: XLA compiled a cluster (tensorflow/compiler/jit/device_compiler.h,
  logged at INFO once per process); `XLA service … initialized` alone does not mean it was used.
"""

from __future__ import annotations

ONEDNN_VERBOSE_ENV = "ONEDNN_VERBOSE"
ONEDNN_VERBOSE_VALUE = "profile_create"
ONEDNN_PREFIX = "onednn_verbose,"


class SignalReader:
    """Feed it the job's output lines; `signals` holds what was seen."""

    def __init__(self) -> None:
        self.onednn_opts = False
        self.onednn_created = 0
        self.onednn_kinds: set[str] = set()
        self.onednn_isa = ""
        self.xla_service = False
        self.xla_compiled = False
        self.log_lines = 0

    def feed(self, line: str) -> None:
        if line.startswith(ONEDNN_PREFIX):
            fields = line.split(",")
            if len(fields) > 5 and fields[2] == "primitive" and fields[3].startswith("create"):
                self.onednn_created += 1
                self.onednn_kinds.add(fields[5])
            elif len(fields) > 4 and fields[3] == "cpu" and fields[4].startswith("isa:"):
                self.onednn_isa = fields[4][4:].strip()
            return
        if "oneDNN custom operations are on" in line:
            self.onednn_opts = True
        elif "Compiled cluster using XLA" in line:
            self.xla_compiled = True
        elif "XLA service" in line and "initialized" in line:
            self.xla_service = True
        if line[:1] in "IWE" and "] " in line:
            self.log_lines += 1

    @property
    def signals(self) -> dict[str, str]:
        found = {
            "onednn_opts": "on" if self.onednn_opts else "not reported",
            "onednn_primitives": str(self.onednn_created),
            "xla": "compiled"
            if self.xla_compiled
            else ("service only" if self.xla_service else "not seen"),
        }
        if self.onednn_kinds:
            found["onednn_kinds"] = ",".join(sorted(self.onednn_kinds))
        if self.onednn_isa:
            found["onednn_isa"] = self.onednn_isa
        found["tf_log_lines"] = str(self.log_lines)
        return found


def passes_on(line: str, *, verbose_ours: bool) -> bool:
    """Whether to pass a line of the job's output on (not the verbose lines we asked for)."""
    return not (verbose_ours and line.startswith(ONEDNN_PREFIX))
