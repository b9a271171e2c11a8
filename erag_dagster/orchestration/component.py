"""The eRAG Dagster Component: eRAG as a ``defs.yaml`` in a team's own Dagster project.

``dg scaffold defs erag_dagster.ERagEvaluation my_eval`` (or a ``defs.yaml`` written by hand,
``type: erag_dagster.ERagEvaluation``) adds the whole eRAG graph to a project's ``defs/`` folder:
the datasets, retrievers, readers and ``evaluation`` settings of a registry (inline in the YAML's
``attributes``, or a ``registry:`` file), validated by the registry's own parser
(:func:`erag_dagster.config.registry.parse_registry`: the same keys, values, defaults and error
lines as ``registry.yaml``), under an asset key prefix the user picks, with the label store, the
reader and the settings as resources, and the schedule, sensors and asset checks of the packaged
project. The graph is built by :func:`erag_dagster.orchestration.definitions.build_defs`, the one
engine the packaged project (``erag_dagster/defs/defs.yaml``, an instance of this component with
default attributes) and the command line use too.

A retriever may be an asset of the user's project: ``kind: asset`` with ``asset_key`` (a list of
names or ``a/b``). Its value, a polars/pandas frame (``query_id, doc_id`` and ``rank`` and/or
``score``) or the path of a TREC/parquet run file, becomes the retriever's run, validated as a
``run_file`` is (:func:`erag_dagster.retrieval.run_file.load_run_value`); the asset is an input
of ``retrieval_run``, so lineage runs from it into ``doc_labels`` and the reports.

What is checked when the component loads (``dg check defs``, a code server's load), each a
one-line :class:`~erag_dagster.core.errors.InputError` naming the ``defs.yaml`` (and the line where
the registry knows it), before anything is bound:

- the attributes' types and keys (:mod:`erag_dagster.orchestration.component_schema`: ``dg check
yaml``
  validates them first, from the same models);
- the ``defs.yaml`` by the rule for every config file (:func:`erag_dagster.core.input_files.
  load_yaml_documents`: a key given twice, anchors, aliases);
- no literal secret in any attribute (:func:`erag_dagster.core.credentials.has_credentials`, the
  test of what the one masking function masks; a reader's prompt texts excepted), never echoed:
  a secret is given by reference (a reader's ``api_key_env``, ``label_store: {env: NAME}``,
  ``PGPASSWORD``); the label store's location by the store's own rule
  (:func:`erag_dagster.labels.store_url.parse_store`);
- the registry by its parser (readers by their own spec rules), and every reader's libraries
  and weights present (:func:`erag_dagster.readers.availability.check_reader_available`,
  without loading a model);
- no ``kind: asset`` retriever reading an asset of this graph (a cycle).

Several instances share a code location: each binds its resources under keys of its own
``key_prefix`` (:class:`erag_dagster.orchestration.resources.keys.ResourceKeys`), so each needs a
distinct prefix. The README-figure check belongs to this package's own project (the instance in
``erag_dagster/defs``), not to a team's.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import dagster as dg
from pydantic import PrivateAttr

from erag_dagster.config.registry import (
    ASSET_KEY_PART,
    TOP_LEVEL_KEYS,
    Registry,
    default_registry_path,
    parse_registry,
)
from erag_dagster.core.credentials import has_credentials
from erag_dagster.core.errors import InputError
from erag_dagster.core.input_files import load_yaml, load_yaml_documents, yaml_key_lines
from erag_dagster.orchestration.component_schema import (
    DatasetAttributes,
    EnvReference,
    EvaluationAttributes,
    GenerationAttributes,
    ReaderAttributes,
    RetrieverAttributes,
    plain,
)

COMPONENT_FILE = "defs.yaml"
"""The file that declares a component instance (``dg``'s convention)."""
PACKAGE_DEFS = Path(__file__).resolve().parents[1] / "defs"
"""The folder of this package's own project (the packaged instance of the component)."""
FREE_TEXT_KEYS = frozenset({"system_prompt", "prompt_template", "answer_prefix", "few_shot"})
"""Reader keys that hold prose for the model, not locations: not searched for secrets."""


@dataclass(frozen=True)
class BuiltGraph:
    """What one loaded instance built: its ``defs.yaml``, registry and key prefix (read by
    ``erag-dagster run --defs``: :mod:`erag_dagster.orchestration.project`)."""

    where: Path
    registry: Registry
    key_prefix: tuple[str, ...]


class ERagEvaluation(dg.Component, dg.Model, dg.Resolvable):
    """eRAG retrieval evaluation (Salemi & Zamani, SIGIR 2024) as Dagster assets: per-document
    labels from your RAG reader, eRAG and human-judgment reports, schedule, sensors and checks.

    Give the registry inline (``retrievers``, ``readers`` and optionally ``evaluation``,
    ``generation``, ``datasets``: the sections of erag-dagster's registry.yaml, same keys and
    defaults; a section left out comes from the packaged registry or ``$ERAG_REGISTRY``) or as a
    file (``registry``). A retriever of ``kind: asset`` reads its run from an asset of your
    project (``asset_key``). Subclass it and override :meth:`get_registry` or
    :meth:`get_resources` to build either another way.
    """

    registry: Annotated[
        str | None,
        dg.Resolver.default(
            description="a registry YAML file (relative to this defs.yaml's folder); not "
            "together with the inline sections"
        ),
    ] = None
    retrievers: Annotated[
        dict[str, RetrieverAttributes] | None,  # type: ignore[valid-type]
        dg.Resolver.default(
            description="name -> retriever config (kind: bm25 | dense | hybrid | run_file | "
            "rerank | asset; asset: asset_key [a, b], an asset of your project that yields a run)"
        ),
    ] = None
    readers: Annotated[
        dict[str, ReaderAttributes] | None,  # type: ignore[valid-type]
        dg.Resolver.default(description="name -> reader config (model, backend, device, ...)"),
    ] = None
    evaluation: Annotated[
        EvaluationAttributes | None,  # type: ignore[valid-type]
        dg.Resolver.default(
            description="the registry's evaluation section (dataset, k, label_k, metric, ...)"
        ),
    ] = None
    generation: Annotated[
        GenerationAttributes | None,  # type: ignore[valid-type]
        dg.Resolver.default(description="where readers generate (executor: inprocess | ray)"),
    ] = None
    datasets: Annotated[
        dict[str, str | DatasetAttributes] | None,
        dg.Resolver.default(description="name -> dataset (a spec, or spec + evaluation ...)"),
    ] = None
    key_prefix: Annotated[
        list[str] | None,
        dg.Resolver.default(
            description="asset key prefix of every eRAG asset (and of its ops, jobs, schedule, "
            "sensors and resource keys); parts of letters, digits and _; default: none (one "
            "instance per code location without it)"
        ),
    ] = None
    label_store: Annotated[
        str | EnvReference | None,
        dg.Resolver.default(
            description="label store: a path, sqlite:///PATH or postgresql://USER@HOST/DB (no "
            "password: PGPASSWORD), or {env: NAME} to read it from $NAME at run time; default: "
            "labels.sqlite under the storage root"
        ),
    ] = None
    deployment: Annotated[
        Literal["local", "production"] | None,
        dg.Resolver.default(description="resource set (default: $DAGSTER_DEPLOYMENT or local)"),
    ] = None
    io_manager: Annotated[
        bool,
        dg.Resolver.default(
            description="bind erag-dagster's parquet/JSON IO manager for the eRAG assets "
            "(false: they store through your project's io_manager)"
        ),
    ] = True

    _built: BuiltGraph | None = PrivateAttr(default=None)

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        """The eRAG Definitions of this instance (:meth:`get_registry`, then
        :func:`erag_dagster.orchestration.definitions.build_defs`). A refusal is one line with no
        stack of this package's frames (``dg check defs`` shows Dagster's own around it)."""
        where = Path(context.path) / COMPONENT_FILE
        try:
            with warnings.catch_warnings():  # Dagster's beta notices for erag's decorators only
                warnings.simplefilter("ignore", dg.BetaWarning)
                warnings.simplefilter("ignore", dg.PreviewWarning)
                return self._defs(where)
        except InputError as exc:
            raise InputError(str(exc)) from None

    @property
    def built(self) -> BuiltGraph | None:
        """What :meth:`build_defs` built (``None`` before)."""
        return self._built

    def get_registry(self, where: Path) -> Registry:
        """The registry of this instance declared in ``where`` (its ``defs.yaml``):
        :func:`build_registry`."""
        return build_registry(self, where)

    def get_resources(self, where: Path) -> dict[str, object]:
        """The resources that replace
        :func:`erag_dagster.orchestration.definitions.build_resources`' by name (``None``: not
        bound): the label store given, and no IO manager with ``io_manager: false``."""
        from erag_dagster.orchestration.resources import LabelStoreResource

        overrides: dict[str, object] = {}
        if isinstance(self.label_store, EnvReference):
            overrides["label_store"] = LabelStoreResource(path=dg.EnvVar(self.label_store.env))
        elif self.label_store:
            overrides["label_store"] = LabelStoreResource(path=self.label_store)
        if not self.io_manager:
            overrides["io_manager"] = None
        return overrides

    def _defs(self, where: Path) -> dg.Definitions:
        # imported here, under the notice filter: the asset modules' decorators warn on import
        from erag_dagster.orchestration.definitions import build_defs

        check_defs_file(where)
        prefix = list(self.key_prefix or [])
        for part in prefix:
            if not ASSET_KEY_PART.match(part):
                raise InputError(
                    f"{where}: key_prefix part {part!r} must be letters, digits and '_'"
                )
        refuse_literal_secrets(self, where)
        registry = self.get_registry(where)
        check_readers(registry, where)
        defs = build_defs(
            registry=registry,
            key_prefix=prefix,
            resources=self.get_resources(where),
            deployment=self.deployment,
            package_checks=where.parent.resolve() == PACKAGE_DEFS,
        )
        refuse_own_assets(registry, defs, where)
        self._built = BuiltGraph(where, registry, tuple(prefix))
        return defs


def check_defs_file(where: Path) -> None:
    """The instance's ``defs.yaml`` read by the rule for every config file (a key given twice,
    an anchor or an alias is one line naming ``file:line``); Dagster's own reader keeps the
    later of two keys. Nothing to read when the instance is not declared in a file."""
    if where.is_file():
        load_yaml_documents(where)


def _strings(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    """Every string inside ``value`` with the keys leading to it."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, (*path, str(key)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _strings(item, (*path, str(i)))


def _line(where: Path, path: tuple[str, ...]) -> str:
    """``where:LINE`` of the attribute at ``path`` when the file says, else ``where``."""
    lines = yaml_key_lines(where, "attributes", *path[:-1]) if where.is_file() else {}
    return f"{where}:{lines[path[-1]]}" if path and path[-1] in lines else str(where)


def refuse_literal_secrets(component: ERagEvaluation, where: Path) -> None:
    """Refuse any attribute holding a literal secret, without echoing it: a value
    :func:`~erag_dagster.core.credentials.has_credentials` finds a credential in (a password in a
    store URL or libpq string, a token in a URL's query or fragment, a bearer token, a key with
    a known prefix). Free text for the reader (:data:`FREE_TEXT_KEYS`) is not searched; a
    template (``{{ … }}``) inside a registry section is refused too: Dagster renders those only
    in the top-level attributes."""
    attributes = {
        key: plain(getattr(component, key))
        for key in ("registry", *TOP_LEVEL_KEYS, "label_store")
        if getattr(component, key) is not None
    }
    for path, text in _strings(attributes):
        if path[0] == "readers" and len(path) > 2 and path[2] in FREE_TEXT_KEYS:
            continue
        name = ".".join(path)
        if has_credentials(text):
            raise InputError(
                f"{_line(where, path)}: {name} holds a credential (not shown); secrets are "
                "given by reference: a reader's key by api_key_env (the variable's NAME), a "
                "database password by PGPASSWORD, a location that must stay out of the UI by "
                "label_store: {env: NAME}"
            )
        if path[0] in TOP_LEVEL_KEYS and "{{" in text:
            raise InputError(
                f"{_line(where, path)}: {name} is a template; templates are rendered in the "
                "top-level attributes only (a registry section is the registry's YAML as "
                "written): write the value, or give the section as a registry: file"
            )
    if isinstance(component.label_store, str):
        from erag_dagster.labels.store_url import parse_store

        try:
            parse_store(component.label_store)
        except InputError as exc:
            raise InputError(f"{_line(where, ('label_store',))}: label_store: {exc}") from None


def check_readers(registry: Registry, where: Path) -> None:
    """Every reader of ``registry`` can be loaded here (libraries and weights present,
    nothing loaded): :func:`erag_dagster.readers.availability.check_readers_available`."""
    from erag_dagster.readers.availability import check_readers_available

    if not any(registry.for_dataset(name).reader_labels for name in registry.dataset_names):
        return  # no dataset gets the reader stages: no reader runs
    inline = registry.path == str(where) and where.is_file()
    lines = yaml_key_lines(where, "attributes", "readers") if inline else {}
    check_readers_available(
        {e.name: e.config for e in registry.readers.values()},
        {
            name: f"{registry.path}:{lines[name]}" if name in lines else registry.path
            for name in registry.readers
        },
    )


def refuse_own_assets(registry: Registry, defs: dg.Definitions, where: Path) -> None:
    """A ``kind: asset`` retriever must read an asset of the project, not one of this graph
    (which would make the graph a cycle): one line naming the retriever and the asset."""
    own = {
        key
        for a in defs.assets or []
        for key in (a.keys if isinstance(a, dg.AssetsDefinition) else [a.key])
    }
    for entry in registry.retrievers.values():
        if entry.config["kind"] != "asset":
            continue
        key = dg.AssetKey(list(entry.config["asset_key"]))
        if key in own:
            raise InputError(
                f"{where}: retriever {entry.name!r} reads {key.to_user_string()}, an asset of "
                "this eRAG graph; kind: asset reads a run from an asset of your project"
            )


def build_registry(component: ERagEvaluation, where: Path) -> Registry:
    """The registry of a component instance declared in ``where`` (its ``defs.yaml``): its
    inline sections, its ``registry`` file, or (neither) the packaged/``$ERAG_REGISTRY`` one.
    Inline sections stand for themselves; a registry section they leave out (``retrievers``,
    ``readers``) is the default registry's (``$ERAG_REGISTRY`` or the packaged one), so a
    ``defs.yaml`` with only ``evaluation:`` evaluates the default retrievers and readers.
    ``kind: asset`` retrievers are allowed in all three."""
    inline = {
        key: plain(value)
        for key in TOP_LEVEL_KEYS
        if (value := getattr(component, key)) is not None
    }
    if component.registry is not None:
        if inline:
            raise InputError(
                f"{where}: give either registry: (a file) or the inline sections "
                f"({', '.join(inline)}), not both"
            )
        path = (where.parent / Path(component.registry).expanduser()).resolve()
        return _registry_file(str(path))
    if not inline:
        return _registry_file(default_registry_path())
    missing = [key for key in ("retrievers", "readers") if key not in inline]
    if missing:
        default = load_yaml(default_registry_path()) or {}
        inline = {**{key: default.get(key) for key in missing}, **inline}
    return parse_registry(inline, str(where), ("attributes",), asset_retrievers=True)


def _registry_file(path: str) -> Registry:
    if not Path(path).exists():
        raise InputError(f"{path}: registry file not found")
    return parse_registry(load_yaml(path) or {}, path, asset_retrievers=True)
