"""The label store across backends, and the Dagster instance on PostgreSQL.

A real PostgreSQL server (tests/postgres_server.py, session-scoped) and the real small reader:
store URLs and their password rule, ``store copy`` SQLite → PostgreSQL → SQLite, the embedded
sample's labels through both stores, the per-deployment resources, and the default pipeline
materialised with run/event storage and the label store on the server.
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import polars as pl
import psycopg
import pytest
import yaml

from erag_dagster.cli import main as cli_main
from erag_dagster.config.registry import load_registry
from erag_dagster.core.errors import InputError, StorageError
from erag_dagster.data.loaders import load_dataset
from erag_dagster.labels.labeller import label_run
from erag_dagster.labels.store import COPY_ORDER, open_store
from erag_dagster.labels.store_url import parse_store, redact_url
from erag_dagster.labels.tables import GENERATIONS
from erag_dagster.orchestration.definitions import build_defs, build_resources
from erag_dagster.orchestration.deployment import deployment as deployment_name
from erag_dagster.orchestration.pipeline import DEFAULT_STAGES, materialize_all
from erag_dagster.orchestration.resources import EvalSettings, LabelStoreResource
from erag_dagster.readers.factory import reader_from_config
from erag_dagster.readers.transformers_reader import TransformersReader
from tests.pipeline_fixtures import scoped_env, small_registry
from tests.postgres_server import PostgresServer
from tests.store_rows import _generations, _scores

REPO = Path(__file__).resolve().parents[1]
READER_CONFIG = {"dtype": "float32", "device": "cpu", "num_threads": 1, "batch_size": 4}


# -- which store a setting names ------------------------------------------------------------------


def test_store_forms_and_the_password_rule(tmp_path: Path) -> None:
    assert parse_store("labels.sqlite") == ("sqlite", "labels.sqlite")
    assert parse_store(tmp_path / "x.sqlite") == ("sqlite", str(tmp_path / "x.sqlite"))
    assert parse_store("sqlite:///rel/x.sqlite") == ("sqlite", "rel/x.sqlite")
    assert parse_store("sqlite:////abs/x.sqlite") == ("sqlite", "/abs/x.sqlite")
    url = "postgresql://erag@db.example:5432/labels?sslmode=require"
    assert parse_store(url) == ("postgresql", url)
    assert parse_store("postgres://h/db").kind == "postgresql"
    for bad, shown in [
        ("postgresql://erag:s3cret@h/db", "postgresql://erag:***@h/db"),
        ("postgresql://erag@h/db?password=s3cret", "postgresql://erag@h/db?password=***"),
    ]:
        with pytest.raises(InputError) as err:
            parse_store(bad)
        assert "s3cret" not in str(err.value) and shown in str(err.value)
        assert "PGPASSWORD" in str(err.value)
    with pytest.raises(InputError, match="unknown label store scheme 'mysql'"):
        parse_store("mysql://h/db")
    assert redact_url("postgresql://u:p@h:1/d") == "postgresql://u:***@h:1/d"


def test_a_store_url_without_its_password_gets_it_from_the_environment(
    postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A role with a password, a server that asks for it on this database: the URL carries
    none, PGPASSWORD supplies it; a wrong one is a one-line error without the password."""
    url = postgres.create_database("with_password")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP ROLE IF EXISTS erag_writer")
        conn.execute("CREATE ROLE erag_writer LOGIN PASSWORD 'pw-from-env'")
        conn.execute("GRANT ALL ON SCHEMA public TO erag_writer")
    # trust stays for the superuser; the new role must give its password (scram over TCP)
    hba = postgres.data / "pg_hba.conf"
    rule = "host with_password erag_writer 127.0.0.1/32 scram-sha-256\n"
    _as_postgres_append(hba, rule)
    with psycopg.connect(postgres.url(), autocommit=True) as conn:
        conn.execute("SELECT pg_reload_conf()")
    role_url = f"postgresql://erag_writer@{postgres.host}:{postgres.port}/with_password"
    monkeypatch.setenv("PGPASSWORD", "pw-from-env")
    store = open_store(role_url)
    assert store.put_generations(_generations(["k1"])) == 1
    assert "pw-from-env" not in repr(store)
    monkeypatch.setenv("PGPASSWORD", "wrong-one")
    with pytest.raises(StorageError) as err:
        open_store(role_url)
    message = str(err.value)
    assert "cannot connect" in message and "\n" not in message and "wrong-one" not in message


def _as_postgres_append(path: Path, text: str) -> None:
    """Prepend a pg_hba rule (first match wins) in a file the server user owns."""
    content = path.read_text()
    path.write_text(text + content)


# -- store copy ------------------------------------------------------------------------------------


def _fill(target: str) -> None:
    store = open_store(target)
    store.register_reader("f" * 64, "reader-x", {"model": {"sha256": "abc"}}, {"name": "x"})
    keys = [f"k{i}" for i in range(25)]
    store.put_generations(_generations(keys, answer="\u00e9t\u00e9 \u2603"))
    store.put_scores(_scores(keys, [i / 24 for i in range(25)]))
    store.put_scores(_scores(keys[:5], [0.5] * 5, metric="f1"))


def _all_rows(target: str) -> dict[str, list[tuple]]:
    with open_store(target, read_only=True) as store:
        return {t.name: [r for rows in store.iter_rows(t, 7) for r in rows] for t in COPY_ORDER}


def test_store_copy_round_trip_sqlite_postgres_sqlite(
    tmp_path: Path, postgres: PostgresServer, capsys: pytest.CaptureFixture
) -> None:
    first, second = str(tmp_path / "first.sqlite"), str(tmp_path / "second.sqlite")
    url = postgres.create_database("copy_target")
    _fill(first)
    assert cli_main(["store", "copy", "--from", first, "--to", url, "--chunk", "10"]) == 0
    out = capsys.readouterr().out
    assert "generations: 25 read, 25 added" in out and "scores: 30 read, 30 added" in out
    assert "readers: 1 read, 1 added" in out and "gold_answers: 1 read, 1 added" in out
    assert cli_main(["store", "copy", "--from", url, "--to", f"sqlite:///{second}"]) == 0
    capsys.readouterr()
    assert _all_rows(first) == _all_rows(url) == _all_rows(second)
    # audit reads the server's store (read-only session) like a file
    assert cli_main(["audit", "--query", "qk3", "--doc", "dk3", "--store", url, "--json"]) == 0
    audit = json.loads(capsys.readouterr().out)
    assert {row["metric"] for row in audit} == {"em", "f1"}
    assert {row["reader_name"] for row in audit} == {"reader-x"}
    # idempotent: a second copy adds nothing
    assert cli_main(["store", "copy", "--from", first, "--to", url]) == 0
    out = capsys.readouterr().out
    assert "generations: 25 read, 0 added" in out and ": 0 rows added" in out
    # first answer wins: a key the target holds keeps its answer
    other = str(tmp_path / "other.sqlite")
    open_store(other).put_generations(_generations(["k0"], answer="other"))
    assert cli_main(["store", "copy", "--from", first, "--to", other]) == 0
    assert "generations: 25 read, 24 added" in capsys.readouterr().out
    assert open_store(other).lookup_generations(["k0"])["answer"].to_list() == ["other"]


def test_store_copy_errors_are_one_line(
    tmp_path: Path, postgres: PostgresServer, capsys: pytest.CaptureFixture
) -> None:
    first = str(tmp_path / "first.sqlite")
    _fill(first)
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    cases = [
        (["--from", first, "--to", first], 2, "needs two different stores"),
        (["--from", first, "--to", "postgresql://u:pw@127.0.0.1/x"], 2, "u:***@"),
        (["--from", str(tmp_path / "none.sqlite"), "--to", first], 1, "no label store here"),
        (["--from", str(empty), "--to", first], 1, "no label store here"),
        (["--from", postgres.create_database("never_created"), "--to", first], 1,
         "no label store here"),
        (["--from", first, "--to", f"postgresql://postgres@127.0.0.1:{_closed_port()}/x"], 1,
         "cannot connect"),
    ]  # fmt: skip
    for args, code, text in cases:
        assert cli_main(["store", "copy", *args]) == code
        err = capsys.readouterr().err
        assert text in err and err.count("\n") == 1 and "Traceback" not in err
        assert "pw@" not in err


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- the same labels through both stores ----------------------------------------------------------


@pytest.fixture(scope="module")
def reader() -> TransformersReader:
    return reader_from_config("smollm2-test", READER_CONFIG).load()


@pytest.mark.slow
def test_sample_labels_are_identical_through_both_stores(
    tmp_path: Path, postgres: PostgresServer, reader: TransformersReader
) -> None:
    """3 questions of the embedded sample x 3 passages (the gold one and two others),
    labelled by the real reader once through an SQLite store and once through PostgreSQL:
    same labels and answers, same stored keys; each store then answers from itself."""
    ds = load_dataset("sample?max_questions=3")
    gold = dict(ds.qrels.select("query_id", "doc_id").iter_rows())
    others = [d for d in ds.corpus.get_column("doc_id") if d not in gold.values()][5:7]
    rows = [
        (qid, doc, rank)
        for qid in ds.queries.get_column("query_id")
        for rank, doc in enumerate([gold[qid], *others], start=1)
    ]
    run = pl.DataFrame(rows, schema=["query_id", "doc_id", "rank"], orient="row")
    stores = {"sqlite": str(tmp_path / "labels.sqlite"), "postgres": postgres.create_database("s")}
    results = {
        name: label_run(run, ds.queries, ds.corpus, reader, "em", open_store(target))
        for name, target in stores.items()
    }
    assert results["sqlite"].judged_now == results["postgres"].judged_now == 9
    assert results["sqlite"].labels.equals(results["postgres"].labels)
    assert results["sqlite"].labels.get_column("label").sum() >= 1  # the gold passages help
    content = ["generation_key", "reader_fingerprint", "query_id", "doc_id", "answer"]

    def stored(target: str) -> pl.DataFrame:
        with open_store(target, read_only=True) as store:
            rows = [r for chunk in store.iter_rows(GENERATIONS) for r in chunk]
        return pl.DataFrame(rows, schema=GENERATIONS.schema, orient="row").select(content)

    assert stored(stores["sqlite"]).equals(stored(stores["postgres"]))
    for target in stores.values():
        again = label_run(run, ds.queries, ds.corpus, reader, "em", open_store(target))
        assert (again.judged_now, again.from_store) == (0, 9)
        assert again.labels.equals(results["sqlite"].labels)


# -- deployments and the Dagster instance on PostgreSQL --------------------------------------------


@pytest.mark.parametrize("config", ["local-postgres", "production"])
def test_instance_configs_drive_dagster_postgres_through_psycopg2(config: str) -> None:
    """With psycopg 3 installed (the label store), SQLAlchemy 2.1 maps a bare postgresql://
    to it, and dagster-postgres' event-log NOTIFY fails there: both PostgreSQL instance
    configs name psycopg2 (the pipeline test below runs the local one for real)."""
    import sqlalchemy as sa

    raw = yaml.safe_load((REPO / f"deploy/{config}/dagster.yaml").read_text())
    db = raw["storage"]["postgres"]["postgres_db"]
    assert db["scheme"] == "postgresql+psycopg2"
    assert sa.create_engine(f"{db['scheme']}://u@h/d").dialect.driver == "psycopg2"
    assert db.get("password", {"env": "x"}).get("env")  # a password only ever from env


def test_deployments_local_is_the_default_and_production_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = load_registry(None)
    monkeypatch.delenv("DAGSTER_DEPLOYMENT", raising=False)
    assert deployment_name() == "local"
    local = build_resources(registry)
    assert local["label_store"] == LabelStoreResource()  # storage root, as before
    production = build_resources(registry, deployment="production")
    assert production["label_store"].path == dg.EnvVar("ERAG_LABEL_STORE")
    assert production["io_manager"].base_dir == dg.EnvVar("ERAG_ASSETS_URL")
    monkeypatch.setenv("DAGSTER_DEPLOYMENT", "staging")
    with pytest.raises(InputError, match="DAGSTER_DEPLOYMENT='staging' unknown"):
        deployment_name()
    monkeypatch.setenv("DAGSTER_DEPLOYMENT", "production")
    dg.Definitions.validate_loadable(build_defs())


@pytest.mark.slow
def test_default_pipeline_materialises_with_the_instance_on_postgres(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    """deploy/local-postgres/dagster.yaml (run, event-log and schedule storage on the server)
    and the production deployment (label store on the server too); 2 questions."""
    instance_url = postgres.create_database("dagster_instance")  # DAGSTER_PG_DB below
    store_url = postgres.create_database("pipeline_labels")
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO / "deploy/local-postgres/dagster.yaml").read_text())
    storage = tmp_path / "storage"
    with scoped_env(
        DAGSTER_HOME=str(home),
        DAGSTER_PG_USERNAME=postgres.user,
        DAGSTER_PG_HOST=postgres.host,
        DAGSTER_PG_PORT=str(postgres.port),
        DAGSTER_PG_DB="dagster_instance",
        ERAG_STORAGE=str(storage),
        DAGSTER_DEPLOYMENT="production",
        ERAG_LABEL_STORE=store_url,
        ERAG_ASSETS_URL=str(tmp_path / "assets"),
    ):
        registry = small_registry(tmp_path / "registry", dataset="sample?max_questions=2")
        with dg.DagsterInstance.from_config(str(home)) as instance:
            assert type(instance.run_storage).__name__ == "PostgresRunStorage"
            assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
            settings = EvalSettings(registry_path=str(registry))
            materialize_all(settings, instance=instance, stages=DEFAULT_STAGES, log=lambda m: None)
            runs = instance.get_runs()
            assert runs and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
            labelled = instance.fetch_materializations(dg.AssetKey("doc_labels"), limit=100)
            judged = sum(
                r.asset_materialization.metadata["pairs_judged_now"].value for r in labelled.records
            )
            assert labelled.records and judged > 0
        with psycopg.connect(instance_url) as conn:
            assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == len(runs)
    assert open_store(store_url, read_only=True).count_generations() >= judged
    assert not list(storage.rglob("labels.sqlite"))  # the store is the server's, not a file
    assert list((tmp_path / "assets").rglob("*"))  # asset values under ERAG_ASSETS_URL
