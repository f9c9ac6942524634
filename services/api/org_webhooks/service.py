"""Set, read and remove the org's outgoing webhook; its secret is generated here and sealed.

The notifier must sign with the secret, so it is encrypted (key ring, associated data
``org_webhook_aad``: bound to the org and the row), not hashed. Each ``set`` issues a new
secret: the caller sees it once. Functions never commit (the request does).
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass

from sqlalchemy.orm import Session

from services.api.core.errors import NotFound
from services.api.org_webhooks import repository
from switchboard.crypto import KeyRing
from switchboard.db.audit import record_audit
from switchboard.db.models.notifications import OrgWebhook, org_webhook_aad

SECRET_PREFIX = "sbowh_"


@dataclass(frozen=True)
class Issued:
    row: OrgWebhook
    secret: str


def get_webhook(session: Session, *, org_id: uuid.UUID) -> OrgWebhook:
    row = repository.of_org(session, org_id)
    if row is None:
        raise NotFound("No outgoing webhook is set")
    return row


def set_webhook(
    session: Session,
    keyring: KeyRing,
    *,
    org_id: uuid.UUID,
    url: str,
    actor_user_id: uuid.UUID | None,
    request_id: str | None,
) -> Issued:
    row = repository.of_org(session, org_id, for_update=True)
    created = row is None
    if row is None:
        row = OrgWebhook(id=uuid.uuid4(), org_id=org_id, created_by_user_id=actor_user_id)
    secret = SECRET_PREFIX + secrets.token_urlsafe(32)
    sealed = keyring.seal(secret.encode(), aad=org_webhook_aad(org_id, row.id))
    row.url = url
    row.secret_ciphertext, row.secret_iv, row.secret_tag, row.secret_key_id = (
        sealed.ciphertext,
        sealed.iv,
        sealed.tag,
        sealed.key_id,
    )
    session.add(row)
    record_audit(
        session,
        org_id=org_id,
        action="org_webhook.created" if created else "org_webhook.replaced",
        actor_user_id=actor_user_id,
        target_type="org_webhook",
        target_id=row.id,
        details={"url": url},
        request_id=request_id,
    )
    session.flush()
    session.refresh(row)
    return Issued(row=row, secret=secret)


def delete_webhook(
    session: Session, *, org_id: uuid.UUID, actor_user_id: uuid.UUID | None, request_id: str | None
) -> None:
    row = repository.of_org(session, org_id, for_update=True)
    if row is None:
        raise NotFound("No outgoing webhook is set")
    session.delete(row)
    record_audit(
        session,
        org_id=org_id,
        action="org_webhook.deleted",
        actor_user_id=actor_user_id,
        target_type="org_webhook",
        target_id=row.id,
        request_id=request_id,
    )
    session.flush()
