#!/usr/bin/env python3
"""docs/configuration.md against the code, both ways: every environment variable the code and scripts read, every
command-line flag of the three commands (the demo, `waxell`, `waxell-sandbox`), every cargo feature of `waxell` and
`waxell-sandbox` and every `waxell::Builder` method must be in it; every variable, flag and builder method it names
must exist. Prints what is missing or stale and exits 1; run by scripts/test.sh."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "configuration.md"
ENV_NAME = re.compile(r"\b((?:WAXELL|WAX|OTEL|E2B|OPENAI|DOCKER|JAEGER)_[A-Z0-9_]*[A-Z0-9])\b")
# In code only string literals count (the same names in upper case are also attribute constants).
ENV_LITERAL = re.compile(r'"((?:WAXELL|WAX|OTEL|E2B|OPENAI|DOCKER|JAEGER)_[A-Z0-9_]*[A-Z0-9])"')
ENV_PY_LITERAL = re.compile(r"""["']((?:WAXELL|WAX|OTEL|E2B|OPENAI|DOCKER|JAEGER)_[A-Z0-9_]*[A-Z0-9])["']""")
# Set by a test or bench for its own child process (how the child knows its role), or planted as a fake secret;
# nothing a person sets.
INTERNAL = {
    "WAXELL_BENCH_MODE_CHILD", "WAXELL_CRASH_HELPER_MODE", "WAXELL_CRASH_HELPER_OUT",
    "WAXELL_SANDBOX_TEST_KILLED_HOST", "WAXELL_SANDBOX_TEST_OWN_PROCESS", "WAXELL_TEST_OWN_PROCESS",
    "WAXELL_UID_LEASE_HELPER", "WAXELL_SPAWN_FD_TEST", "WAXELL_OVERHEAD_MODE", "WAXELL_OVERHEAD_RUNS",
    "WAXELL_FAKE_OPENAI_API_KEY", "E2B_KEY", "OPENAI_KEY",
    "WAXELL_KEY",  # the scrubber's name for a Waxell key in redactions ([REDACTED:WAXELL_KEY])
}
# Read by a dependency, not by our code, and documented because they change what a user sees.
READ_BY_DEPENDENCIES = {
    "OTEL_TRACES_SAMPLER_ARG",  # opentelemetry_sdk's sampler, beside OTEL_TRACES_SAMPLER which we read too
}
# Flags of cargo itself that the doc shows in commands.
CARGO_FLAGS = {"--features", "--bin", "--path", "--help", "--release", "--locked", "--package"}


def rust_files():
    skip = {"target", "tls-neighbour", ".git"}
    for path in ROOT.rglob("*.rs"):
        if not skip.intersection(path.relative_to(ROOT).parts):
            yield path


def env_in_code():
    names = {}
    for path in rust_files():
        for name in ENV_LITERAL.findall(path.read_text()):
            if name not in INTERNAL:
                names.setdefault(name, path.relative_to(ROOT))
    for path in (ROOT / "scripts").glob("*.sh"):
        text = path.read_text()
        for name in re.findall(r"\$\{?((?:WAXELL|DEBIAN)_[A-Z0-9_]*[A-Z0-9])", text):
            names.setdefault(name, path.relative_to(ROOT))
    # The Python scripts read theirs as string literals (os.environ.get("..."), os.environ["..."]).
    for path in (ROOT / "scripts").glob("*.py"):
        if path.resolve() == pathlib.Path(__file__).resolve():
            continue  # this file names the variables it skips
        for name in ENV_PY_LITERAL.findall(path.read_text()):
            if name not in INTERNAL:
                names.setdefault(name, path.relative_to(ROOT))
    return names


def flags_in_code():
    """`--flag` of every clap field marked `#[arg(long ...)]` in the three commands' sources."""
    flags = {}
    sources = list((ROOT / "demos" / "src").rglob("*.rs"))
    sources += list((ROOT / "waxell" / "src" / "bin").rglob("*.rs"))
    sources += list((ROOT / "waxell-sandbox" / "src" / "bin").rglob("*.rs"))
    for path in sources:
        attribute, pending = "", None
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if attribute or stripped.startswith("#[arg("):
                attribute += stripped
                if stripped.endswith(")]"):
                    if re.search(r"\blong\b", attribute):
                        named = re.search(r'\blong\s*=\s*"([a-z0-9-]+)"', attribute)
                        pending = named.group(1) if named else ""
                    attribute = ""
                continue
            field = re.match(r"(?:pub(?:\([a-z]+\))?\s+)?([a-z_][a-z0-9_]*)\s*:", stripped)
            if pending is not None and field:
                flags.setdefault("--" + (pending or field.group(1).replace("_", "-")), path.relative_to(ROOT))
                pending = None
    return flags


def features():
    found = {}
    for crate in ("waxell", "waxell-sandbox"):
        text = (ROOT / crate / "Cargo.toml").read_text()
        section = re.search(r"^\[features\]\n(.*?)(?=^\[)", text, re.S | re.M).group(1)
        for name in re.findall(r"^([a-z][a-z0-9-]*)\s*=", section, re.M):
            if name != "default":
                found[name] = crate
    return found


def builder_methods():
    """Public methods of `impl Builder` in waxell/src (the one `waxell::builder()` returns)."""
    methods = set()
    for path in (ROOT / "waxell" / "src").rglob("*.rs"):
        text = path.read_text()
        for start in re.finditer(r"^impl Builder \{", text, re.M):
            depth, i = 0, start.end() - 1
            while True:
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                if depth == 0:
                    break
                i += 1
            methods.update(re.findall(r"\bpub fn ([a-z_][a-z0-9_]*)", text[start.start():i]))
    return methods - {"init"}


def main():
    doc = DOC.read_text()
    problems = []
    env = env_in_code()
    for name, where in sorted(env.items()):
        if name not in doc:
            problems.append(f"environment variable {name} (read in {where}) is not in {DOC.name}")
    for name in sorted(set(ENV_NAME.findall(doc)) - set(env) - READ_BY_DEPENDENCIES):
        problems.append(f"{DOC.name} names {name}, which nothing reads")
    flags = flags_in_code()
    for flag, where in sorted(flags.items()):
        if not re.search(re.escape(f"`{flag}") + r"[` =\[]", doc):
            problems.append(f"flag {flag} (in {where}) is not in {DOC.name}")
    for flag in sorted(set(re.findall(r"`(--[a-z0-9-]+)", doc)) - set(flags) - CARGO_FLAGS):
        problems.append(f"{DOC.name} names the flag {flag}, which no command has")
    for name, crate in sorted(features().items()):
        if f"`{name}`" not in doc:
            problems.append(f"cargo feature `{name}` of {crate} is not in {DOC.name}")
    methods = builder_methods()
    for name in sorted(methods):
        if f"`{name}" not in doc:
            problems.append(f"Builder::{name} is not in {DOC.name}")
    for name in sorted(set(re.findall(r"Builder::([a-z_][a-z0-9_]*)", doc)) - methods):
        problems.append(f"{DOC.name} names Builder::{name}, which waxell::Builder does not have")
    for line in problems:
        print(f"check-config-docs: {line}", file=sys.stderr)
    if problems:
        return 1
    print(f"check-config-docs: ok ({len(env)} variables, {len(flags)} flags, {len(features())} features, "
          f"{len(methods)} builder methods)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
