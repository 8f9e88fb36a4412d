"""Opening an MLflow tracking store. A store whose database schema this mlflow does
not know (written by a newer mlflow) or has not migrated (written by an older one)
is one line saying what to do, not MLflow's advice to `mlflow db upgrade`, which
cannot help a store from the future."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from mlflow import MlflowClient

from .store_location import telemetry_off_by_default, tracking_uri

# The revision the store's alembic_version row names, as MLflow reports it: its own
# schema check, or alembic when MLflow tries to create missing tables from there.
_REVISION = re.compile(r"found version (\w+)|Can't locate revision identified by '(\w+)'")


class StoreUnreadable(Exception):
    """This mlflow cannot open the tracking store; the message is one line saying what to do."""


def open_client(uri: str) -> MlflowClient:
    """An MlflowClient on `uri` (opening it checks the schema); raises StoreUnreadable."""
    telemetry_off_by_default()
    from alembic.util.exc import CommandError
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient
    for name in ("mlflow", "alembic"):  # set after the import: mlflow configures its loggers on import
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        return MlflowClient(tracking_uri=uri)
    except (MlflowException, CommandError) as e:
        found = _REVISION.search(str(e))
        if found is None:
            raise
        raise StoreUnreadable(_advice(uri, found.group(1) or found.group(2))) from None


def check_store(store: Path, uri: Optional[str] = None) -> None:
    """Before any GPU work or session folder: raises StoreUnreadable if the store
    exists and this mlflow cannot open it. A store not written yet is not created."""
    if uri is None and not (Path(store) / "mlflow.db").is_file():
        return
    open_client(uri or tracking_uri(Path(store)))


def known_revisions() -> set[str]:
    """The schema revisions this mlflow's migrations know."""
    import mlflow
    from alembic.script import ScriptDirectory
    migrations = Path(mlflow.__file__).parent / "store" / "db_migrations"
    return {script.revision for script in ScriptDirectory(str(migrations)).walk_revisions()}


def _advice(uri: str, revision: str) -> str:
    import mlflow
    where = uri.removeprefix("sqlite:///")
    if revision in known_revisions():
        return (f"the MLflow store {where} was written by an older mlflow (schema {revision}): back it up, "
                f"then run `mlflow db upgrade {uri}`, or use a new --store DIR")
    return (f"the MLflow store {where} was written by a newer mlflow than the installed {mlflow.__version__} "
            f"(schema {revision} is unknown to it): use a new --store DIR, or install the mlflow that wrote it")
