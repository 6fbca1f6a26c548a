"""Node Feature Discovery's reading of a features.d file, and Kubernetes' label rules, in Python.

Reimplemented (not copied) from the sources below, so that a test can say what NFD would do
with hwtune's file: which lines become labels, which are dropped and why, and whether the
expiry directive parses. Each function names the Go function it follows.

- kubernetes-sigs/node-feature-discovery `source/local/local.go` at
  a650db05eccd1755417188498717f1e3f696cfb0: `parseDirectives`, `parseFeatureFile`,
  `getFeaturesFromFiles` (dotfiles skipped), `getFileContent` (`MaxFeatureFileSize` = 65536:
  a bigger file is skipped whole, with an error logged).
- same repository, `pkg/nfd-worker/nfd-worker.go` at ed7bba0b5b3aac694c9ff2bb81f5bd81002be5bc:
  `GetFeatureLabels` (labels of the `local` source are not prefixed; a name failing
  `IsQualifiedName` or a value failing `IsValidLabelValue` drops that one label, logged).
- same repository, `pkg/apis/nfd/validate/validate.go` at
  e7ae507f0b3bbb76b869383ac079c0ca8136772f: `Label` (nfd-master: unprefixed keys and
  `kubernetes.io` / `*.kubernetes.io` namespaces other than `feature.node.` and
  `profile.node.kubernetes.io` and their sub-namespaces are refused, one label at a time,
  by `filterFeatureLabels` in `pkg/nfd-master/nfd-master.go` at
  03f1876118781706f00c6effa33e9462be585950).
- kubernetes/kubernetes `staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go` at
  03014f486c86dbe8a7fbe275fe14250854aab219: `IsQualifiedName`, `IsValidLabelValue`,
  `IsDNS1123Subdomain`. Go's `^…$` without (?m) anchors at the ends of the text, hence
  `fullmatch` here (Python's `$` would also match before a final newline).
- Go's `time.Parse(time.RFC3339, …)` (layout "2006-01-02T15:04:05Z07:00"): four-digit year,
  two-digit fields, optional fractional seconds, then `Z` or `±hh:mm`; fields out of range
  are errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

MAX_FEATURE_FILE_SIZE = 65536
DIRECTIVE_PREFIX = "# +"

_QUALIFIED = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|([+-])(\d{2}):(\d{2}))"
)


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value) > 253:
        errs.append("must be no more than 253 characters")
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        errs.append("not a DNS-1123 subdomain")
    return errs


def is_qualified_name(value: str) -> list[str]:
    """apimachinery `IsQualifiedName`: [prefix/]name, prefix a DNS subdomain, name ≤ 63."""
    parts = value.split("/")
    if len(parts) > 2:
        return ["more than one '/'"]
    errs: list[str] = []
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        errs += ["prefix part must be non-empty"] if not prefix else is_dns1123_subdomain(prefix)
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if not _QUALIFIED.fullmatch(name):
        errs.append("name part must be alphanumerics, '-', '_' or '.', alphanumeric at both ends")
    return errs


def is_valid_label_value(value: str) -> list[str]:
    """apimachinery `IsValidLabelValue`: empty, or ≤ 63 of [-A-Za-z0-9_.] alphanumeric-ended."""
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABEL_VALUE.fullmatch(value):
        errs.append("must be alphanumerics, '-', '_' or '.', alphanumeric at both ends")
    return errs


def parse_rfc3339(text: str) -> datetime:
    """Go's `time.Parse(time.RFC3339, text)`; ValueError where Go returns an error."""
    found = _RFC3339.fullmatch(text)
    if found is None:
        raise ValueError(f"cannot parse {text!r} as RFC3339")
    year, month, day, hour, minute, second = (int(found.group(i)) for i in range(1, 7))
    fraction = found.group(7)
    micro = int((fraction[1:] + "000000")[:6]) if fraction else 0
    if found.group(8) == "Z":
        zone = timezone.utc
    else:
        sign = -1 if found.group(9) == "-" else 1
        hours, minutes = int(found.group(10)), int(found.group(11))
        if hours > 23 or minutes > 59:
            raise ValueError(f"time zone offset out of range in {text!r}")
        zone = timezone(sign * timedelta(hours=hours, minutes=minutes))
    # datetime() raises ValueError for a month, day, hour, minute or second out of range,
    # as Go's Parse does ("month out of range", "day out of range", ...).
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=zone)


@dataclass
class ParsedFile:
    """What `parseFeatureFile` makes of one file: its two maps and the errors it logs."""

    features: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)


def _directive(line: str, opts: dict[str, object]) -> str | None:
    """`parseDirectives`: the error it returns (logged by the caller), None when none."""
    if not line.startswith(DIRECTIVE_PREFIX):
        return None  # a plain comment
    key, sep, value = line[len(DIRECTIVE_PREFIX) :].partition("=")
    if key == "expiry-time":
        if not sep:
            return f"invalid directive format in {line!r}"
        try:
            opts["expiry"] = parse_rfc3339(value.strip())
        except ValueError as err:
            return f"failed to parse expiry-date directive: {err}"
    elif key == "no-feature":
        opts["skip_feature"] = True
    elif key == "no-label":
        opts["skip_label"] = True
    else:
        return f"unknown feature file directive {key!r}"
    return None


def parse_feature_file(text: str, now: datetime) -> ParsedFile:
    """`parseFeatureFile`: lines split on "\\n" and trimmed; `#` lines are comments or
    directives (an error is logged and the line skipped, the file goes on); each entry is
    dropped while the expiry in force is before `now` (the expiry starts at `now`, so a file
    without one never expires); `key[=value]` with the value defaulting to "true"."""
    out = ParsedFile()
    opts: dict[str, object] = {"expiry": now, "skip_feature": False, "skip_label": False}
    for raw in text.split("\n"):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            error = _directive(line, opts)
            if error is not None:
                out.errors.append(error)
            continue
        expiry = opts["expiry"]
        assert isinstance(expiry, datetime)
        if expiry < now:
            continue
        key, sep, value = line.partition("=")
        value = value if sep else "true"
        for target, skip in ((out.features, "skip_feature"), (out.labels, "skip_label")):
            if opts[skip]:
                target.pop(key, None)
            else:
                target[key] = value
        opts["skip_feature"] = opts["skip_label"] = False  # one entry each
    return out


def read_features_dir(directory: Path, now: datetime) -> ParsedFile:
    """`getFeaturesFromFiles` + `getFileContent`: every regular file not starting with "."
    (in name order, as os.ReadDir returns them), a file over 65536 bytes skipped whole."""
    merged = ParsedFile()
    for path in sorted(directory.iterdir(), key=lambda p: p.name):
        if path.name.startswith(".") or not path.is_file():
            continue
        if path.stat().st_size > MAX_FEATURE_FILE_SIZE:
            merged.errors.append(f"{path.name}: file size limit exceeded")
            continue
        parsed = parse_feature_file(path.read_bytes().decode("utf-8", "replace"), now)
        merged.features.update(parsed.features)
        merged.labels.update(parsed.labels)
        merged.errors += [f"{path.name}: {e}" for e in parsed.errors]
    return merged


def worker_rejects(name: str, value: str) -> list[str]:
    """nfd-worker `GetFeatureLabels` for the `local` source: why it would drop this label."""
    return is_qualified_name(name) + is_valid_label_value(value)


def master_rejects(name: str, value: str) -> list[str]:
    """nfd-master `validate.Label` (default configuration: no -deny-label-ns, no whitelist)."""
    errs = is_qualified_name(name)
    if errs:
        return errs
    namespace = name.partition("/")[0] if "/" in name else ""
    if not namespace:
        # addNsToMapKeys puts it under feature.node.kubernetes.io/ (or, with the
        # DisableAutoPrefix feature gate, validate.Label refuses it): never hwtune's namespace
        return ["unprefixed: not published under the namespace it was written for"]
    if namespace == "kubernetes.io" or namespace.endswith(".kubernetes.io"):
        allowed = ("feature.node.kubernetes.io", "profile.node.kubernetes.io")
        if namespace not in allowed and not namespace.endswith(tuple("." + a for a in allowed)):
            return [f"namespace {namespace!r} is not allowed"]
    if value.startswith("@"):
        return ["a value starting with '@' is read as a dynamic '@domain.feature.element'"]
    return is_valid_label_value(value)


_GO_INT = re.compile(r"[+-]?[0-9]+")


def _parse_int64(text: str) -> int | None:
    """Go's `strconv.ParseInt(text, 10, 64)`: an optional sign and decimal digits in range."""
    if not _GO_INT.fullmatch(text):
        return None
    number = int(text)
    return number if -(1 << 63) <= number < (1 << 63) else None


def selector_matches(labels: dict[str, str], key: str, operator: str, bound: str) -> bool:
    """A node selector requirement `key operator [bound]` for `Gt`/`Lt`: apimachinery
    `labels.Requirement.Matches` (pkg/labels/selector.go) parses the label's value and the one
    bound with ParseInt and matches nothing when either is no integer or the label is absent.
    NFD's matchExpressions `Gt`/`Lt` compare integers the same way (an error for non-integers)."""
    value = labels.get(key)
    have, want = (None if value is None else _parse_int64(value)), _parse_int64(bound)
    if have is None or want is None:
        return False
    if operator == "Gt":
        return have > want
    if operator == "Lt":
        return have < want
    raise ValueError(f"{operator}: only Gt and Lt are modelled")
