"""Read and change the org's own settings (docs/api.md "Organization"). Sync functions over the
request's org-scoped session; they never commit.

Every reader takes the values when it needs them — the dispatcher's rate limit per dispatch
batch (``admit_org_runs``), the brief's zone per composition — so a change applies from the
next one, with no restart and no record to publish.
"""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from services.api.core.errors import NotFound
from services.api.organization.schemas import OrganizationPatch, OrganizationView
from switchboard.db.audit import record_audit
from switchboard.db.models.tenancy import Organization


def get(session: Session, org_id: uuid.UUID) -> OrganizationView:
    return OrganizationView.model_validate(_row(session, org_id))


def update(
    session: Session, org_id: uuid.UUID, body: OrganizationPatch, user_id: uuid.UUID | None, request_id: str
) -> OrganizationView:
    """Apply the fields sent; audited ``organization.updated`` with each change's before and after."""
    org = _row(session, org_id, for_update=True)
    changes = {
        field: {"from": getattr(org, field), "to": value}
        for field, value in body.changes().items()
        if getattr(org, field) != value
    }
    for field, change in changes.items():
        setattr(org, field, change["to"])
    if changes:
        record_audit(
            session,
            org_id=org_id,
            action="organization.updated",
            actor_user_id=user_id,
            target_type="organization",
            target_id=org_id,
            details={"changes": changes},
            request_id=request_id,
        )
        session.flush()
        session.refresh(org)
    return OrganizationView.model_validate(org)


def _row(session: Session, org_id: uuid.UUID, *, for_update: bool = False) -> Organization:
    org = session.get(Organization, org_id, with_for_update=for_update)
    if org is None:
        raise NotFound("No such organization")
    return org
