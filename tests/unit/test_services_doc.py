"""docs/services.md's API section names the body `POST /orders/{id}/status` accepts: its field
and every status the service's validator allows, read from the validator itself."""

from __future__ import annotations

import re

from kit.validation import Enum
from services.orders.domain import STATUS_CHANGE
from tests.support.harness import REPO


def test_services_doc_names_the_status_field_and_its_values() -> None:
    text = (REPO / "docs" / "services.md").read_text()
    # The orders service's item of the API list: from the route to the next service's item.
    start = text.index("`POST /orders/{id}/status`")
    item = re.sub(r"\s+", " ", text[start : text.index("\n- **", start)])
    status = STATUS_CHANGE.fields["status"]
    assert isinstance(status, Enum)
    assert '{"status": ' in item, item
    assert "`status` one of " + ", ".join(f"`{s}`" for s in status.choices) in item, item
    assert "reason" in STATUS_CHANGE.fields
    assert '"reason"' in item, item
