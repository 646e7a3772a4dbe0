"""``bicep-contracts``: check infra/ against the pinned module and resource contracts, or refresh them.

    bicep-contracts check [--infra infra] [--contracts infra/contracts] [--self-test FIXTURES]
    bicep-contracts refresh --avm-repo PATH --types-repo PATH [--infra infra] [--contracts infra/contracts]

``check`` exits 1 on any finding (and on any self-test problem), 0 when there is none.
``refresh`` needs local clones of Azure/bicep-registry-modules (with its release tags) and
Azure/bicep-types-az; it rewrites the contracts of every module version and API version infra/ uses.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .check import check_tree
from .usage import registry_modules, resources_used


def main(argv: list[str] | None = None) -> int:
    """Run the command line; return the exit code."""
    parser = argparse.ArgumentParser(prog="bicep-contracts", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="report every mistake against the pinned contracts")
    refresh_cmd = sub.add_parser("refresh", help="regenerate the contracts from the published sources")
    for command in (check, refresh_cmd):
        command.add_argument(
            "--infra", type=Path, default=Path("infra"), help="the Bicep tree (default infra)"
        )
        command.add_argument(
            "--contracts",
            type=Path,
            default=Path("infra/contracts"),
            help="the contracts (default infra/contracts)",
        )
    check.add_argument(
        "--self-test", type=Path, metavar="FIXTURES", help="also run the fixtures in this folder"
    )
    refresh_cmd.add_argument(
        "--avm-repo", type=Path, required=True, help="clone of Azure/bicep-registry-modules"
    )
    refresh_cmd.add_argument("--types-repo", type=Path, required=True, help="clone of Azure/bicep-types-az")
    args = parser.parse_args(argv)

    if args.command == "refresh":
        from .refresh import refresh  # only refresh needs git

        written = refresh(args.infra, args.contracts, args.avm_repo, args.types_repo)
        for path in written:
            print(f"wrote {path}")
        return 0

    try:
        findings = check_tree(args.infra, args.contracts)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    for finding in findings:
        print(finding)
    modules = len(registry_modules(args.infra))
    resources = len(resources_used(args.infra))
    status = 1 if findings else 0
    print(
        f"contract check: {len(findings)} finding(s) in {args.infra} "
        f"({modules} registry module versions, {resources} resource API versions)"
    )
    if args.self_test:
        from .selftest import self_test

        problems = self_test(args.self_test, args.contracts)
        for problem in problems:
            print(problem)
        fixtures = len(list(args.self_test.glob("*.bicep")))
        print(f"contract self-test: {len(problems)} problem(s) in {fixtures} fixture(s)")
        status = status or (1 if problems else 0)
    return status


if __name__ == "__main__":
    sys.exit(main())
