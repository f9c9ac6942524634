"""What the notifier does with each record (no broker code here: ``service.py`` wires the consumer).

- ``run_completed``, completed and not dry, with a reply or queued send-tool intents: claim
  (committed), send through the session's channel plugin, record the outcome; a transient
  failure is retried in the background (``retries.py``), never in front of the next record.
  While people own the conversation (a person took it over mid-run), nothing is sent: the
  messages are kept and marked failed, ``conversation_with_humans``.
  Any other run (dry, handoff, failed, aborted) sends nothing; its queued intents are
  marked failed so nothing lingers as "pending" — except a handoff's acknowledgement (the
  version's ``handoff_message``), sent once like a reply, and what an owner approved on the
  run (sent with the approval).
  A failed or aborted run that leaves customer messages unanswered
  (``switchboard.run_outcomes``) is announced on the org's webhook as
  ``conversation.unanswered`` (``unanswered.py``); a message the channel did not take
  (failed, or unknown after a stop) as ``message.undelivered`` (``undelivered.py``).
- ``handoff_triggered`` (not dry): assign the conversation to humans and notify the org's
  outgoing webhook (in the background: ``notifications.py``).
- ``human_messages``: a person answered from Switchboard after a handoff: claim, send and
  record it like a reply (kind ``human``, no run).
- ``insights`` whose key starts with ``budget_incident:`` (the brief's budget incidents) or
  ``channel_down:`` (the API saw a WhatsApp number disconnect): notify the org's webhook once
  per key, as ``budget.incident`` or ``channel.disconnected``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from services.notifier import unanswered
from services.notifier.channels import ChannelError, ChannelRegistry, SendResult
from services.notifier.channels.webhook import WebhookChannel
from services.notifier.metrics import MESSAGES_DELIVERED, NOTIFICATIONS, SEND_ATTEMPTS
from services.notifier.notifications import NotificationQueue
from services.notifier.retries import Retry, RetryQueue
from services.notifier.retry import Outcome, RetryPolicy, send_with_retry
from services.notifier.store import ARCHIVED, NO_WEBHOOK, Claimed, Notification, NotifierStore
from switchboard.contracts import HandoffTriggered, HumanMessageRequested, Insight, RunCompleted, RunStatus
from switchboard.contracts.enums import InsightKind, InsightStatus
from switchboard.db.models.notifications import DeliveryKind, NotificationState
from switchboard.kafka.consumer import Inbound
from switchboard.observability.logging import get_logger
from switchboard.run_outcomes import WITH_HUMANS, left_unanswered

log = get_logger(__name__)
WITHHELD_MESSAGE = "people took the conversation over while the send waited to be retried"

BUDGET_INCIDENT_PREFIX = "budget_incident:"
CHANNEL_DOWN_PREFIX = "channel_down:"
# Insights the org's webhook hears of, by key prefix: the event type it receives.
NOTIFIED_INSIGHTS = {BUDGET_INCIDENT_PREFIX: "budget.incident", CHANNEL_DOWN_PREFIX: "channel.disconnected"}

Hook = Callable[[Claimed], Awaitable[None]]


async def _no_hook(_: Claimed) -> None:
    return None


def _channel_of(claimed: Claimed) -> str:
    """The metrics' channel label of a claim (``none``: nothing to send it through)."""
    return claimed.route.channel if claimed.route else "none"


@dataclass
class Hooks:
    """Test seams around the one send: a crash injected here proves what a restart does."""

    after_claim: Hook = _no_hook
    after_send: Hook = _no_hook


class NotifierHandlers:
    def __init__(
        self, store: NotifierStore, channels: ChannelRegistry, policy: RetryPolicy, hooks: Hooks | None = None
    ) -> None:
        self._store = store
        self._channels = channels
        self._policy = policy
        self._hooks = hooks or Hooks()
        self.retries = RetryQueue(policy, self._record_retried)
        # Org webhook notifications are sent in the background (notifications.py).
        self.notifications = NotificationQueue(self._notify)

    async def handle(self, inbound: Inbound) -> None:
        """The consumer's handler: route by record type."""
        record = inbound.value
        if isinstance(record, RunCompleted):
            await self.on_run_completed(record)
        elif isinstance(record, HandoffTriggered):
            await self.on_handoff(record)
        elif isinstance(record, Insight):
            await self.on_insight(record)
        elif isinstance(record, HumanMessageRequested):
            await self.on_human_message(record)

    # ------------------------------------------------------------------ customer replies

    async def on_run_completed(self, completed: RunCompleted) -> None:
        if completed.dry_run:
            return  # dry runs never reach the customer (the send tool did not even queue)
        where = {"run_id": str(completed.run_id), "org_id": str(completed.org_id)}
        if completed.status is not RunStatus.COMPLETED:
            cancelled = await self._store.cancel_intents(
                completed.org_id, completed.run_id, f"not_sent_run_{completed.status.value}"
            )
            if cancelled:
                log.info(
                    "queued messages not sent", extra={**where, "status": completed.status.value, "count": cancelled}
                )
            if completed.status is RunStatus.HANDOFF and completed.would_send_to and completed.final_text:
                # The version's handoff message (the runner set it as the text): sent once, like a reply.
                claims = await self._store.claim_reply(completed)
                await self._send_claimed(completed.org_id, completed.run_id, claims, where)
            elif left_unanswered(completed):
                await self._notify_unanswered(completed, where)
            return
        run_claims = await self._store.claim_run(completed)
        if run_claims.withheld:
            # Counted after the claim committed (the same rule as every outcome, ``_record``).
            for kind in run_claims.withheld:
                MESSAGES_DELIVERED.labels("none", kind.value, "withheld").inc()
            log.info("reply withheld: people own the conversation", extra={**where, "count": len(run_claims.withheld)})
        await self._send_claimed(completed.org_id, completed.run_id, run_claims.claimed, where)

    async def _notify_unanswered(self, completed: RunCompleted, where: dict[str, str]) -> None:
        """A failed or aborted run left its customer waiting: tell the humans, once per run."""
        notification = await self._store.claim_notification(
            completed.org_id, unanswered.dedupe_key(completed), unanswered.EVENT_TYPE, unanswered.payload(completed)
        )
        log.warning("customer left unanswered", extra={**where, "status": completed.status.value})
        if notification is not None:
            self.notifications.submit(completed.org_id, notification)

    async def on_human_message(self, requested: HumanMessageRequested) -> None:
        """A person answered from Switchboard after a handoff: send it once, like a reply."""
        where = {"org_id": str(requested.org_id), "message_id": str(requested.message_id)}
        await self._send_claimed(requested.org_id, None, await self._store.claim_human(requested), where)

    async def on_action_approved(self, insight: Insight) -> None:
        """An approved proposal ran its send tool after the run ended: deliver what it queued, once."""
        assert insight.run_id is not None
        where = {"run_id": str(insight.run_id), "org_id": str(insight.org_id), "insight_key": insight.insight_key}
        claimed = await self._store.claim_intents(insight.org_id, insight.run_id)
        await self._send_claimed(insight.org_id, insight.run_id, claimed, where, owners_word=True)

    async def _send_claimed(
        self,
        org_id: uuid.UUID,
        run_id: uuid.UUID | None,
        claims: list[Claimed],
        where: dict[str, str],
        *,
        late: bool = False,
        owners_word: bool = False,
    ) -> None:
        """Send the claims in order. One that fails for a moment is retried in the background, and
        the ones after it wait for it there: the customer gets a run's messages in the order the run
        wrote them (a reply's "anything else?" never before the payment link queued ahead of it).
        ``late``: they waited behind a retry, so each first looks at what a retry looks at.
        ``owners_word``: what an owner's approval queued — sent like a person's own message, whatever
        a takeover since (its first attempt never looked; its retries must not either)."""
        for index, claimed in enumerate(claims):
            await self._hooks.after_claim(claimed)
            if not claimed.started:
                # Its turn: it was ``claimed``, waiting behind the run's earlier messages (store.py).
                if not await self._store.start_send(org_id, claimed.message_id):
                    continue  # another process began it, or it ended meanwhile: not this one's to send
                claimed = replace(claimed, started=True)
            for_agents = run_id is not None and not owners_word
            if late:
                outcome = await self._one_attempt(claimed, where, for_agents=for_agents, org_id=org_id)()
            else:
                outcome = await self._attempt(claimed, where)
            await self._hooks.after_send(claimed)
            error = outcome.error
            if error is not None and error.transient and outcome.attempts < self._policy.max_attempts:
                # Not in front of the next record: the retries wait in the background (retries.py).
                log.info(
                    "send failed, retrying in the background",
                    extra={**where, "message_id": str(claimed.message_id), "error_code": error.code},
                )
                followers = tuple(claims[index + 1 :])
                retry_once = self._one_attempt(claimed, where, for_agents=for_agents, org_id=org_id, waiting=followers)
                self.retries.schedule(
                    Retry(org_id, run_id, claimed, outcome.attempts, error, retry_once, followers=followers)
                )
                return
            await self._record(org_id, run_id, claimed, outcome, where)

    def _one_attempt(
        self,
        claimed: Claimed,
        where: dict[str, str],
        *,
        for_agents: bool,
        org_id: uuid.UUID,
        waiting: tuple[Claimed, ...] = (),
    ) -> Callable[[], Awaitable[Outcome]]:
        """A retry's attempt. A message the channel echoed meanwhile went out: an earlier attempt
        whose answer was lost (a timeout, a 500) had sent it, and it is recorded sent, not sent
        again. No message is sent once its number was archived while it waited its backoff
        (``channel_session_archived``), and an agent's message not once people took the
        conversation over (``conversation_with_humans``): it ends failed."""

        async def attempt() -> Outcome:
            await self._store.keep_claims(org_id, [c.message_id for c in waiting])  # still ours (store.py)
            gate = await self._store.retry_gate(org_id, claimed.message_id)
            message = {**where, "message_id": str(claimed.message_id)}
            if gate.echoed_external_id is not None:
                log.info("retry not needed: the channel echoed the message, it went out", extra=message)
                return Outcome(attempts=0, result=SendResult(gate.echoed_external_id))
            if gate.archived:
                log.info("retry withheld: the number was archived", extra=message)
                return Outcome(attempts=0, error=ChannelError(ARCHIVED, "the number was archived", transient=False))
            if for_agents and gate.with_humans:
                log.info("retry withheld: people own the conversation", extra=message)
                return Outcome(attempts=0, error=ChannelError(WITH_HUMANS, WITHHELD_MESSAGE, transient=False))
            return await self._attempt(claimed, where)

        return attempt

    async def _record_retried(self, retry: Retry, outcome: Outcome) -> None:
        where = (
            {"run_id": str(retry.run_id), "org_id": str(retry.org_id)}
            if retry.run_id
            else {"org_id": str(retry.org_id)}
        )
        await self._record(retry.org_id, retry.run_id, retry.claimed, outcome, where)
        if retry.followers:  # the run's next messages, which waited for this one
            await self._send_claimed(retry.org_id, retry.run_id, list(retry.followers), where, late=True)

    async def _record_interrupted(self, retry: Retry, outcome: Outcome) -> None:
        # Stopping: its ``message.undelivered`` notice stays pending for the sweep of the next notifier.
        # The messages waiting behind it were never attempted: failed, certainly not sent (never sent later).
        await self._store.record_interrupted(retry.org_id, retry.run_id, retry.claimed, attempts=outcome.attempts)
        MESSAGES_DELIVERED.labels(_channel_of(retry.claimed), retry.claimed.kind.value, "unknown").inc()
        for follower in retry.followers:
            if await self._store.record_not_attempted(retry.org_id, retry.run_id, follower) is not None:
                MESSAGES_DELIVERED.labels(_channel_of(follower), follower.kind.value, "failed").inc()

    async def close(self, grace_s: float) -> None:
        """At a stop: pending retries get ``grace_s``, the rest are recorded ``unknown``; notifications
        in flight get the same grace, the rest stay ``pending`` for the sweep."""
        await asyncio.gather(self.retries.close(grace_s, self._record_interrupted), self.notifications.close(grace_s))

    async def abandon(self) -> None:
        """At a kill: retries and notification sends stop now, recording nothing (the sweep covers them)."""
        await asyncio.gather(self.retries.abandon(), self.notifications.abandon())

    async def resend_stale_notifications(self, older_than_s: float) -> int:
        """The sweep: notifications left ``pending`` (a notifier crashed mid-send) are sent again."""
        submitted = 0
        for org_id, notification in await self._store.stale_notifications(older_than_s):
            if notification.id not in self.notifications.in_flight:
                submitted += self.notifications.submit(org_id, notification)
        return submitted

    async def _record(
        self, org_id: uuid.UUID, run_id: uuid.UUID | None, claimed: Claimed, outcome: Outcome, where: dict[str, str]
    ) -> None:
        error = outcome.error
        channel_name = _channel_of(claimed)
        SEND_ATTEMPTS.labels(channel_name).inc(outcome.attempts)
        notice = await self._store.record_outcome(
            org_id,
            run_id,
            claimed,
            attempts=outcome.attempts,
            external_id=outcome.result.external_id if outcome.result else None,
            error_code=error.code if error else None,
            error_message=error.message if error else None,
        )
        if notice is not None:
            self.notifications.submit(org_id, notice)  # the customer is not getting it: tell the humans
        # Counted once the outcome is committed: a redelivery after a failed commit records it again.
        label = "sent" if error is None else "withheld" if error.code == WITH_HUMANS else "failed"
        MESSAGES_DELIVERED.labels(channel_name, claimed.kind.value, label).inc()
        log.info(
            "message delivered" if error is None else "message not delivered",
            extra={
                **where,
                "message_id": str(claimed.message_id),
                "kind": claimed.kind.value,
                "attempts": outcome.attempts,
                "error_code": error.code if error else None,
            },
        )

    async def _attempt(self, claimed: Claimed, where: dict[str, str]) -> Outcome:
        """One send through the claim's channel (``attempts`` 0 when there is no channel to try)."""
        route = claimed.route
        if route is None:
            return Outcome(
                attempts=0,
                error=ChannelError(claimed.route_error or "no_route", "no channel to send through", transient=False),
            )
        try:
            channel = self._channels.get(route.channel)
        except ChannelError as exc:
            return Outcome(attempts=0, error=exc)
        try:
            result = await channel.send(
                route.to(claimed.chat_id),
                claimed.text,
                idempotency_key=str(claimed.message_id),
                from_model=claimed.kind is not DeliveryKind.HUMAN,
            )
        except ChannelError as exc:
            return Outcome(attempts=1, error=exc)
        return Outcome(attempts=1, result=result)

    # ------------------------------------------------------------------ humans

    async def on_handoff(self, handoff: HandoffTriggered) -> None:
        if handoff.dry_run:
            return  # a test run's handoff assigns nothing and tells no one
        payload = {
            "conversation_id": str(handoff.conversation_id),
            "contact_id": str(handoff.contact_id),
            "channel_session_id": str(handoff.channel_session_id),
            "run_id": str(handoff.run_id),
            "agent_id": str(handoff.agent_id),
            "reason": handoff.reason,
            "urgency": handoff.urgency.value,
            "trigger": handoff.trigger.value,
            "matched_keyword": handoff.matched_keyword,
        }
        notification = await self._store.hand_to_humans(handoff, payload)
        log.info(
            "conversation handed to humans",
            extra={"conversation_id": str(handoff.conversation_id), "run_id": str(handoff.run_id)},
        )
        if notification is not None:
            self.notifications.submit(handoff.org_id, notification)

    async def on_insight(self, insight: Insight) -> None:
        if (
            insight.kind is InsightKind.PROPOSED_ACTION
            and insight.status is InsightStatus.ACTIONED
            and insight.run_id is not None
        ):
            await self.on_action_approved(insight)
            return
        event_type = next((t for p, t in NOTIFIED_INSIGHTS.items() if insight.insight_key.startswith(p)), None)
        if event_type is None:
            return
        payload = {
            "insight_key": insight.insight_key,
            "insight_id": str(insight.insight_id),
            "date": insight.insight_date.isoformat(),
            "title": insight.title,
            "body": insight.body,
            "agent_id": None if insight.agent_id is None else str(insight.agent_id),
        }
        notification = await self._store.claim_notification(
            insight.org_id, f"insight:{insight.insight_key}", event_type, payload
        )
        if notification is not None:
            self.notifications.submit(insight.org_id, notification)

    async def _notify(
        self, org_id: uuid.UUID, notification: Notification, limiter: asyncio.Semaphore | None = None
    ) -> None:
        """POST the signed event to the org's webhook; at least once per notification row.

        ``limiter`` (the morning push's) bounds the reads, attempts and the record, never the
        backoff between attempts: an org whose webhook is down held its slot for its whole retry
        budget, and at the hour a time zone is due a few dead webhooks kept every other org's
        morning digest waiting."""
        gate: contextlib.AbstractAsyncContextManager[Any] = limiter or contextlib.nullcontext()
        async with gate:
            destination = await self._store.org_webhook(org_id)
        if isinstance(destination, str):  # nothing to call: why, recorded
            unsent = NotificationState.SKIPPED if destination == NO_WEBHOOK else NotificationState.FAILED
            if unsent is NotificationState.FAILED:
                log.error("org webhook secret does not open", extra={"org_id": str(org_id), "error_code": destination})
            async with gate:
                await self._store.finish_notification(
                    org_id, notification.id, unsent, attempts=0, error_code=destination
                )
            NOTIFICATIONS.labels(notification.event_type, unsent.value).inc()
            return
        document: dict[str, Any] = {
            "id": str(notification.event_id),
            "type": notification.event_type,
            "org_id": str(org_id),
            "data": notification.payload,
        }
        channel = self._channels.get(WebhookChannel.name)
        body = WebhookChannel.document(document)

        async def send() -> SendResult:
            async with gate:
                return await channel.send(destination, body, idempotency_key=str(notification.event_id))

        outcome = await send_with_retry(
            send, self._policy, what={"org_id": str(org_id), "notification": notification.event_type}
        )
        state = NotificationState.SENT if outcome.error is None else NotificationState.FAILED
        SEND_ATTEMPTS.labels(WebhookChannel.name).inc(outcome.attempts)
        NOTIFICATIONS.labels(notification.event_type, state.value).inc()
        async with gate:
            await self._store.finish_notification(
                org_id,
                notification.id,
                state,
                attempts=outcome.attempts,
                error_code=outcome.error.code if outcome.error else None,
            )
