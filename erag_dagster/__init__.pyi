"""Types of :mod:`erag_dagster`'s lazily imported names (see ``__init__.py``)."""

from erag_dagster.api import evaluate as evaluate
from erag_dagster.api import label as label
from erag_dagster.api import score as score
from erag_dagster.core.errors import EnvironmentFault as EnvironmentFault
from erag_dagster.core.errors import InputError as InputError
from erag_dagster.orchestration.component import ERagEvaluation as ERagEvaluation

__version__: str
__all__: list[str]
