"""Dagster's beta/preview notices filtered out of erag-dagster's own processes.

They are for developers of Dagster code (data versions, partition mappings and pools are beta
or preview APIs), not for a user's run output. The filter must be in place **before** Dagster
and the asset modules are imported, since the asset decorators warn at import time; so this
module imports only ``dagster_shared``'s warning classes (a few small modules, not Dagster).
Import it first: :mod:`erag_dagster.cli` and :mod:`erag_dagster.orchestration.pipeline` do.
"""

import warnings

from dagster_shared.utils.warnings import BetaWarning, PreviewWarning


def filter_dagster_notices() -> None:
    """Ignore Dagster's :class:`BetaWarning` and :class:`PreviewWarning` in this process."""
    warnings.filterwarnings("ignore", category=BetaWarning)
    warnings.filterwarnings("ignore", category=PreviewWarning)


filter_dagster_notices()
