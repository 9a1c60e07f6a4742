"""The C event builders of `projections.decoding` (`_eventbuild.c`): their definition is
`decoding._builder_python`."""

from collections.abc import Callable
from typing import Any

CHECK_NONE: int
CHECK_NAME: int
CHECK_OPTIONAL_NAME: int
CHECK_POOL: int
CHECK_TEXT: int

class Builder:
    def __init__(
        self,
        cls: type[Any],
        fields: tuple[tuple[str, Any, int], ...],
        refused: Callable[[Any], bool] | None,
        refused_error: type[BaseException],
        general: str,
        /,
    ) -> None: ...
    def __call__(self, wire: Any, /) -> Any: ...
