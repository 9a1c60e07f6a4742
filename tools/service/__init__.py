"""The gpu-credits HTTP service: FastAPI routes over one live projection, decisions
committed in groups by a single writer. `create_app` builds the application;
`app.state.ledger` is the `LedgerService` the web view reads through."""

from tools.service.app import create_app
from tools.service.ledger import LedgerService

__all__ = ["LedgerService", "create_app"]
