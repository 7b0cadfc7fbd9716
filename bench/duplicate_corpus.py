"""The curator's duplicate-detection corpus: pairs of skills, each (name, description, body), labelled.

DUPLICATES do the same job in different words (another author, another vocabulary); DISTINCT pairs do
different jobs with the same words ("deploy with docker compose" and "debug docker networking"). The
tests (tests/skills/test_skill_duplicates.py) and `python -m bench.duplicates` measure both methods on it.
"""

from __future__ import annotations

from pathlib import Path

from control_plane.config.settings import SkillsSettings
from control_plane.skills.library import SkillLibrary
from control_plane.skills.model import GatePolicy, Verdict

Skill = tuple[str, str, str]

DUPLICATES: list[tuple[Skill, Skill]] = [
    (
        (
            "postgres-backup",
            "Back up a PostgreSQL database to a compressed file.",
            "1. Run pg_dump -Fc on the database.\n2. Write the dump to backups/ with the date in its name.\n"
            "3. Check the archive lists its tables with pg_restore -l.",
        ),
        (
            "dump-pg-db",
            "Save a snapshot of a Postgres DB as an archive.",
            "Use pg_dump in custom format to export everything, store the result under a dated filename in "
            "the backups folder, then verify it by listing the contents with pg_restore.",
        ),
    ),
    (
        (
            "renew-tls-certificate",
            "Renew the HTTPS certificate before it expires and reload nginx.",
            "1. certbot renew --quiet.\n2. nginx -t to test the configuration.\n3. systemctl reload nginx.",
        ),
        (
            "refresh-ssl-cert",
            "Get a fresh Let's Encrypt cert when the old one is about to lapse.",
            "Ask certbot for a new certificate, make sure the web server config still parses, then tell the "
            "web server to pick up the new cert without downtime.",
        ),
    ),
    (
        (
            "rotate-logs",
            "Rotate and compress application log files.",
            "1. Configure logrotate with daily rotation and compress.\n2. Keep 14 old files.\n"
            "3. Run logrotate -f once to check the configuration.",
        ),
        (
            "archive-old-logfiles",
            "Keep log files from filling the disk by cycling and gzipping them.",
            "Set up logrotate to cycle each log every day, gzip the previous ones and retain two weeks of "
            "history; force a run to make sure the setup works.",
        ),
    ),
    (
        (
            "csv-to-json",
            "Convert a CSV file into a JSON array of objects.",
            "1. Read the CSV with csv.DictReader.\n2. Collect the rows into a list.\n3. json.dump it with "
            "indent=2.",
        ),
        (
            "spreadsheet-rows-as-json",
            "Turn comma-separated rows into a list of JSON records.",
            "Parse the comma-separated text with Python's DictReader so each line becomes a mapping keyed by "
            "the header, then serialise all of them as one pretty-printed JSON list.",
        ),
    ),
    (
        (
            "find-large-files",
            "Find what uses the most disk space.",
            "1. du -sh /* 2>/dev/null | sort -h.\n2. Descend into the biggest directory and repeat.\n"
            "3. Report the top ten paths with their sizes.",
        ),
        (
            "disk-hog-report",
            "Report which directories take up the most storage.",
            "Measure the size of each top-level folder with du, order them by size, drill down into the "
            "heaviest one, and list the ten biggest entries found.",
        ),
    ),
    (
        (
            "python-wheel-release",
            "Build a Python package and publish it to PyPI.",
            "1. python -m build.\n2. twine check dist/*.\n3. twine upload dist/*.",
        ),
        (
            "ship-package-to-pypi",
            "Release a new version of the library on the package index.",
            "Create the sdist and wheel with the build module, validate the metadata with twine, then upload "
            "the files from dist with twine.",
        ),
    ),
    (
        (
            "git-undo-last-commit",
            "Undo the last commit but keep its changes.",
            "1. git reset --soft HEAD~1.\n2. git status shows the changes staged again.",
        ),
        (
            "revert-previous-commit-keep-work",
            "Take back the most recent commit without losing the edits.",
            "Move the branch pointer back by one with a soft reset so the edited files stay staged; check "
            "with git status.",
        ),
    ),
    (
        (
            "cron-nightly-job",
            "Schedule a script to run every night.",
            "1. crontab -e.\n2. Add 0 2 * * * /path/to/script.sh >> /var/log/job.log 2>&1.\n"
            "3. crontab -l to confirm.",
        ),
        (
            "run-task-at-2am",
            "Make a command execute automatically each day at two in the morning.",
            "Edit the user's cron table and add an entry for minute 0 hour 2 every day that runs the script "
            "and appends its output to a log; list the table to confirm it is there.",
        ),
    ),
]

DISTINCT: list[tuple[Skill, Skill]] = [
    (
        (
            "deploy-docker-compose",
            "Deploy the application with docker compose.",
            "1. docker compose pull.\n2. docker compose up -d.\n3. docker compose ps shows every service up.",
        ),
        (
            "debug-docker-networking",
            "Debug why docker containers cannot reach each other.",
            "1. docker network ls and docker network inspect.\n2. docker compose ps to see the services.\n"
            "3. docker exec into a container and curl the other service by name.",
        ),
    ),
    (
        (
            "postgres-backup",
            "Back up a PostgreSQL database to a compressed file.",
            "1. Run pg_dump -Fc on the database.\n2. Write the dump to backups/ with the date in its name.",
        ),
        (
            "postgres-slow-queries",
            "Find the slow queries of a PostgreSQL database.",
            "1. Enable pg_stat_statements on the database.\n2. Select the queries by total time.\n"
            "3. Run EXPLAIN ANALYZE on the worst.",
        ),
    ),
    (
        (
            "git-undo-last-commit",
            "Undo the last commit but keep its changes.",
            "1. git reset --soft HEAD~1.\n2. git status shows the changes staged again.",
        ),
        (
            "git-bisect-regression",
            "Find the commit that introduced a bug.",
            "1. git bisect start.\n2. git bisect bad on the current commit, git bisect good on the last good "
            "one.\n3. Test each commit git checks out and mark it until git names the first bad commit.",
        ),
    ),
    (
        (
            "nginx-reverse-proxy",
            "Put nginx in front of an application as a reverse proxy.",
            "1. Write a server block with proxy_pass to the application port.\n2. nginx -t.\n"
            "3. systemctl reload nginx.",
        ),
        (
            "renew-tls-certificate",
            "Renew the HTTPS certificate before it expires and reload nginx.",
            "1. certbot renew --quiet.\n2. nginx -t to test the configuration.\n3. systemctl reload nginx.",
        ),
    ),
    (
        (
            "csv-to-json",
            "Convert a CSV file into a JSON array of objects.",
            "1. Read the CSV with csv.DictReader.\n2. Collect the rows into a list.\n3. json.dump it.",
        ),
        (
            "validate-json-schema",
            "Check a JSON file against a JSON schema.",
            "1. Load the JSON file and the schema.\n2. jsonschema.validate them.\n3. Report each error with "
            "its path in the file.",
        ),
    ),
    (
        (
            "python-wheel-release",
            "Build a Python package and publish it to PyPI.",
            "1. python -m build.\n2. twine check dist/*.\n3. twine upload dist/*.",
        ),
        (
            "python-virtualenv-setup",
            "Set up a Python virtual environment for a project.",
            "1. python -m venv .venv.\n2. Activate it.\n3. pip install the project's requirements.",
        ),
    ),
    (
        (
            "rotate-logs",
            "Rotate and compress application log files.",
            "1. Configure logrotate with daily rotation and compress.\n2. Keep 14 old files.",
        ),
        (
            "search-logs-for-errors",
            "Find the errors in application log files.",
            "1. grep -i error in the log files.\n2. Count them by message.\n3. Show the lines around the "
            "most frequent.",
        ),
    ),
    (
        (
            "docker-image-size",
            "Make a docker image smaller.",
            "1. Use a slim base image.\n2. Multi-stage build: copy only the artefacts.\n"
            "3. docker image ls to compare the sizes.",
        ),
        (
            "docker-container-logs",
            "Read the logs of a docker container.",
            "1. docker ps to find the container.\n2. docker logs --tail 100 -f the container.\n"
            "3. docker inspect for its restart count.",
        ),
    ),
]


def skill_md(skill: Skill) -> str:
    name, description, body = skill
    return f"---\nname: {name}\ndescription: {description}\n---\n{body}\n"


def passes(candidate: Path, policy: GatePolicy, backend: object, pool: object) -> Verdict:
    return Verdict(candidate.name, "pass")  # curation is measured, not the gate


def library_with(root: Path, skills: list[Skill], settings: SkillsSettings | None = None) -> SkillLibrary:
    """A library at `root` holding `skills`, each merged as its version 1."""
    library = SkillLibrary(root, settings or SkillsSettings(), backend=lambda: None, verify=passes)  # type: ignore[arg-type, return-value]
    for skill in skills:
        library.write(skill[0], "SKILL.md", skill_md(skill), new=True)
        assert library.submit(skill[0], proposer="corpus").version is not None
    return library
