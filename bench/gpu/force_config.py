#!/usr/bin/env python3
"""Write a tuning cache that gives every kernel of FILEs built by TEMPLATE the configuration
CONFIG, where CONFIG passes the template's checks for that kernel (as `irc tune --list` shows),
so that `irc run`/`irc bench` with `--tune-cache CACHE` build those kernels with it: a way to
check or time one point of a space on every graph without a toggle in the code. No GPU needed.

    python3 bench/gpu/force_config.py IRC TEMPLATE@VERSION CONFIG CACHE [--arch ARCH] FILE...

VERSION is the space's configuration-space version (`TemplateSpace::version`; a cache entry
under another version is not read). Prints each file and how many kernels got CONFIG; exits 1
when irc fails on a file or when no kernel of any file got CONFIG (a wrong version, a point
that fails the checks everywhere), so that a check run over the cache cannot pass vacuously.
"""
import json
import re
import subprocess
import sys


def main(argv):
    irc, space, config, cache = argv[:4]
    rest = argv[4:]
    arch = "sm_90a"
    if rest[:1] == ["--arch"]:
        arch, rest = rest[1], rest[2:]
    template, version = space.split("@v")
    # Entries are keyed by the irc version too (`irc --version`: "irc X.Y.Z").
    irc_version = subprocess.run([irc, "--version"], capture_output=True,
                                 text=True).stdout.split()[-1]
    entries = {}
    for f in rest:
        run = subprocess.run([irc, "tune", "--list", "--no-tune-cache", "--top-k", "100",
                              "--arch", arch, "-O", f], capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"{f}: irc tune --list failed:\n{run.stderr}")
        out = run.stdout
        hits = 0
        for block in re.split(r"(?m)^(?=kernel \d+/\d+: )", out):
            m = re.match(r"kernel \d+/\d+: @\S+ \(([^;]+); (.*)\): ", block)
            if not m or m.group(1) != template:
                continue
            if not re.search(rf"(?m)^\s+{re.escape(config)}\s+estimate", block):
                continue
            problem = m.group(2)
            key = f"{template}@v{version}:{problem}|{arch}|irc {irc_version}"
            entries[key] = dict(template=template, space_version=int(version), problem=problem,
                                arch=arch, irc_version=irc_version, config=config, ms=0.0,
                                default_config=config, default_ms=0.0, device="forced",
                                candidates=1, tuned_at=0)
            hits += 1
        print(f"{f}: {hits} kernel(s) with {config}")
    with open(cache, "w") as fh:
        json.dump({"format": "irc-tune-cache", "version": 1, "entries": entries}, fh, indent=1)
    if not entries:
        sys.exit(f"no kernel of the {len(rest)} file(s) got {config} ({space})")


if __name__ == "__main__":
    main(sys.argv[1:])
