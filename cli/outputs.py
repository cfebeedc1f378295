"""`nbl admin gc` and `nbl admin migrate-outputs`: the command-line side of service/outputs (gc.py,
migration.py), which keep the logic."""

from __future__ import annotations

import json

from cli.admin import db_session


def add_output_commands(asub) -> None:
    p = asub.add_parser(
        "gc",
        help="report and free disk space: scratch and staging directories of ended jobs, "
        "the statistics cache over its cap",
        description="Frees NBL_HOME/jobs/<id> and NBL_PUBLISH_DIR/.nbl-staging/<id> of jobs that "
        "ended (or that the database does not know), statistics cache entries least recently used "
        "first down to NBL_STATS_CACHE_MAX_BYTES, and cache writes left unfinished over a day ago. "
        "Never touches published outputs nor a queued or running job's directories.",
    )
    p.add_argument("--dry-run", action="store_true", help="report only; delete nothing")
    p.add_argument(
        "--json", action="store_true", help='print {"dry_run", "items": [{kind, path, bytes, reason}], "bytes"}'
    )
    p.set_defaults(func=cmd_gc)
    p = asub.add_parser(
        "migrate-outputs",
        help="move local outputs of the old flat layout NBL_PUBLISH_DIR/<name> to "
        "NBL_PUBLISH_DIR/<team>/<name> and record them as local:<team>/<name>",
        description="Run once after upgrading, workers stopped; safe to run again. The database "
        "says whose each output is (its last writer); folders no job recorded are listed, not moved.",
    )
    p.add_argument("--dry-run", action="store_true", help="report only; move and rewrite nothing")
    p.add_argument("--json", action="store_true", help='print {"dry_run", "moves": [...], "left": [...]}')
    p.set_defaults(func=cmd_migrate_outputs)


def cmd_gc(args) -> int:
    from service.core.settings import Settings
    from service.outputs.gc import collect

    settings = Settings()
    with db_session(settings) as session:
        report = collect(settings, session, dry_run=args.dry_run)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    verb = "would free" if args.dry_run else "freed"
    for i in report["items"]:
        print(f"{i['kind']:8} {i['bytes']:>14,} B  {i['path']}  ({i['reason']})")
    print(f"{verb} {report['bytes']:,} bytes in {len(report['items'])} item(s)")
    return 0


def cmd_migrate_outputs(args) -> int:
    from service.core.settings import Settings
    from service.outputs.migration import migrate

    settings = Settings()
    with db_session(settings) as session:
        report = migrate(settings, session, dry_run=args.dry_run)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    for m in report["moves"]:
        print(f"{m['status']:9} {m['name']} -> {m['team']}/{m['name']} (owner {m['job_id']}, {m['uris']} URI(s))")
    for name in report["left"]:
        print(f"left      {name} (no job recorded it: move it by hand, or leave it)")
    print("dry run: nothing changed" if args.dry_run else f"{len(report['moves'])} output(s) migrated")
    return 0
