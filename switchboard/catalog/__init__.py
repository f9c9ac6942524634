"""The model catalog [004 §2.2]: ``models.yaml`` is its single source.

``load_catalog()`` reads and validates the file shipped with this package;
``sync_catalog(connection)`` makes the ``ai_models`` table match it (migrations
call it; see the comment at the top of the YAML file for the change procedure).
"""

from switchboard.catalog.loader import (
    CATALOG_FILE,
    Catalog,
    CatalogError,
    CatalogModel,
    CatalogProvider,
    SyncReport,
    load_catalog,
    parse_catalog,
    sync_catalog,
)

__all__ = [
    "CATALOG_FILE",
    "Catalog",
    "CatalogError",
    "CatalogModel",
    "CatalogProvider",
    "SyncReport",
    "load_catalog",
    "parse_catalog",
    "sync_catalog",
]
