"""bazelrc templates (string.Template), shipped as the package hwtune.bazel_templates."""
