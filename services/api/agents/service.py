"""Agent and version rules [004 §4.3-4.5]: save creates drafts, only drafts change,
publish switches the answering version atomically, pause and archive stop an agent.

Functions take a sync ``Session`` whose transaction the request owns and never
commit. Every write to an agent or its versions starts by locking the agent row
(``switchboard.db.agent_lifecycle.lock_agent``); see the repository docstring for why one lock is
enough. Changes the dispatcher must learn about (publish, pause, archive, and a
rename or re-prioritization of a live agent) are written to the outbox as a
``published`` record in the same transaction.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from services.api.agents import repository
from services.api.agents.schemas import (
    MICROS_PER_CENT,
    AgentCreate,
    AgentPatch,
    AgentStatus,
    AgentView,
    AgentWithVersion,
    FollowupView,
    TriggerConfigView,
    VersionConfig,
    VersionPatch,
    VersionView,
    normalize_trigger,
)
from services.api.core.errors import Conflict, NotFound, ValidationFailed
from switchboard.contracts import Serde
from switchboard.contracts.enums import PublishedChange
from switchboard.contracts.records import AgentPublished, AgentVersionSnapshot, FollowUpConfig, TriggerConfig
from switchboard.contracts.topics import Topics
from switchboard.db import agent_lifecycle
from switchboard.db.audit import record_audit
from switchboard.db.enums import (
    AgentKind,
    AgentPauseReason,
    AgentVersionStatus,
    ChannelSessionStatus,
    ConcurrencyPolicy,
    LlmProvider,
)
from switchboard.db.models.agents import AiAgent, AiAgentVersion, AiProviderCredential
from switchboard.db.models.memory import STATE_NOTE_TOOL
from switchboard.db.outbox import enqueue_record
from switchboard.tool_catalog import is_known_tool

# Statuses a publish may switch to: a new draft, or a version published before (rollback,
# or resuming a paused agent) [004 §4.5 step 1].
PUBLISHABLE_STATUSES = frozenset({AgentVersionStatus.DRAFT.value, AgentVersionStatus.SUPERSEDED.value})
# A channel session must be connected to be bound at publish time [004 §4.5 step 3].
PUBLISHABLE_SESSION_STATUSES = frozenset({ChannelSessionStatus.WORKING.value})


# --------------------------------------------------------------------------- views


def agent_status(agent: AiAgent) -> AgentStatus:
    if agent.archived_at is not None:
        return AgentStatus.ARCHIVED
    if agent.published_version_id is not None:
        return AgentStatus.PUBLISHED
    if agent.paused_at is not None:
        return AgentStatus.PAUSED
    return AgentStatus.DRAFT


def _agent_view(agent: AiAgent, *, latest_draft_id: uuid.UUID | None, latest_number: int | None) -> AgentView:
    return AgentView(
        id=agent.id,
        name=agent.name,
        description=agent.description,
        kind=AgentKind(agent.kind),
        priority=agent.priority,
        status=agent_status(agent),
        published_version_id=agent.published_version_id,
        latest_draft_id=latest_draft_id,
        latest_version_number=latest_number,
        paused_at=agent.paused_at,
        pause_reason=agent.pause_reason,
        archived_at=agent.archived_at,
        created_by=agent.created_by,
        created_at=agent.created_at,
        updated_at=agent.updated_at,
    )


def agent_views(session: Session, org_id: uuid.UUID, agents: list[AiAgent]) -> list[AgentView]:
    ids = [a.id for a in agents]
    drafts = repository.latest_drafts(session, org_id, ids)
    numbers = repository.latest_version_numbers(session, org_id, ids)
    return [_agent_view(a, latest_draft_id=drafts.get(a.id), latest_number=numbers.get(a.id)) for a in agents]


def agent_view(session: Session, org_id: uuid.UUID, agent: AiAgent) -> AgentView:
    return agent_views(session, org_id, [agent])[0]


def _stored_trigger(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """The stored trigger in the API shape, defaults filled in (rows written outside the API may be partial)."""
    data = normalize_trigger(dict(raw or {}))
    return {
        "event_types": list(data.get("event_types") or ["message"]),
        "ignore_groups": bool(data.get("ignore_groups", True)),
        "ignore_own": bool(data.get("ignore_own", True)),
        "keyword_regex": data.get("keyword_regex"),
        "business_hours": data.get("business_hours"),
        "classification": data.get("classification"),
    }


def _stored_followup(raw: Mapping[str, Any] | None) -> dict[str, Any]:
    """An absent property means the legacy behavior: enabled [004 §4.4]."""
    data = dict(raw or {})
    return {
        "enabled": bool(data.get("enabled", True)),
        "callback_enabled": bool(data.get("callback_enabled", True)),
        "flow_pointer_ids": list(data.get("flow_pointer_ids") or []),
    }


def _config_dict(version: AiAgentVersion) -> dict[str, Any]:
    """The version's configuration in the API (``VersionConfig``) shape, as JSON values."""
    return {
        "system_prompt": version.system_prompt,
        "persona": version.persona,
        "skills": list(version.skills),
        "provider": version.provider,
        "model": version.model,
        "credential_id": None if version.credential_id is None else str(version.credential_id),
        "tool_ids": list(version.tool_ids),
        "trigger_config": _stored_trigger(version.trigger_config),
        "channel_session_id": None if version.channel_session_id is None else str(version.channel_session_id),
        "max_steps": version.max_steps,
        "token_budget": version.token_budget,
        "cost_budget_cents": max(1, version.cost_budget_micros // MICROS_PER_CENT),
        "history_message_window": version.history_message_window,
        "history_token_window": version.history_token_window,
        "silence_timeout_minutes": version.silence_timeout_minutes,
        "pause_on_proposal": version.pause_on_proposal,
        "subagent_ids": [str(a) for a in version.subagent_ids],
        "classification_enabled": version.classification_enabled,
        "handoff_keywords": list(version.handoff_keywords),
        "handoff_tool_enabled": version.handoff_tool_enabled,
        "handoff_message": version.handoff_message,
        "followup": _stored_followup(version.followup),
        "concurrency_policy": version.concurrency_policy,
    }


def version_view(version: AiAgentVersion) -> VersionView:
    config = _config_dict(version)
    return VersionView(
        id=version.id,
        agent_id=version.agent_id,
        version_number=version.version_number,
        status=AgentVersionStatus(version.status),
        system_prompt=version.system_prompt,
        persona=version.persona,
        skills=config["skills"],
        provider=version.provider,
        model=version.model,
        credential_id=version.credential_id,
        tool_ids=config["tool_ids"],
        trigger_config=TriggerConfigView.model_validate(config["trigger_config"]),
        channel_session_id=version.channel_session_id,
        max_steps=version.max_steps,
        token_budget=version.token_budget,
        cost_budget_cents=config["cost_budget_cents"],
        history_message_window=version.history_message_window,
        history_token_window=version.history_token_window,
        silence_timeout_minutes=version.silence_timeout_minutes,
        pause_on_proposal=version.pause_on_proposal,
        subagent_ids=list(version.subagent_ids),
        classification_enabled=version.classification_enabled,
        handoff_keywords=config["handoff_keywords"],
        handoff_tool_enabled=version.handoff_tool_enabled,
        handoff_message=version.handoff_message,
        followup=FollowupView.model_validate(config["followup"]),
        concurrency_policy=ConcurrencyPolicy(version.concurrency_policy),
        published_at=version.published_at,
        superseded_at=version.superseded_at,
        created_by=version.created_by,
        created_at=version.created_at,
        updated_at=version.updated_at,
    )


def snapshot(agent: AiAgent, version: AiAgentVersion) -> AgentVersionSnapshot | None:
    """The ``published`` record's full snapshot; None for a version without a channel (never publishable)."""
    if version.channel_session_id is None:
        return None
    config = _config_dict(version)
    return AgentVersionSnapshot(
        version_id=version.id,
        agent_id=agent.id,
        version_number=version.version_number,
        agent_name=agent.name,
        priority=agent.priority,
        agent_created_at=agent.created_at,
        system_prompt=version.system_prompt,
        provider=version.provider,
        model=version.model,
        credential_id=version.credential_id,
        tool_ids=tuple(config["tool_ids"]),
        # The classification filter is the runner's (labels exist only in a run): not in the snapshot.
        trigger=TriggerConfig.model_validate(
            {k: v for k, v in config["trigger_config"].items() if k != "classification"}
        ),
        channel_session_id=version.channel_session_id,
        max_steps=version.max_steps,
        token_budget=version.token_budget,
        cost_budget_cents=config["cost_budget_cents"],
        history_message_window=version.history_message_window,
        history_token_window=version.history_token_window,
        handoff_keywords=tuple(config["handoff_keywords"]),
        handoff_tool_enabled=version.handoff_tool_enabled,
        followup=FollowUpConfig.model_validate(config["followup"]),
        concurrency_policy=ConcurrencyPolicy(version.concurrency_policy),
        status=AgentVersionStatus(version.status),
        created_at=version.created_at,
        published_at=version.published_at,
    )


# --------------------------------------------------------------------------- validation


def _grantable(tool: str) -> bool:
    """A catalog tool, or the runner's local ``state_note`` (docs/memory.md "State")."""
    return is_known_tool(tool) or tool == STATE_NOTE_TOOL


def _problem(loc: list[str], msg: str, kind: str) -> dict[str, Any]:
    return {"loc": loc, "msg": msg, "type": kind}


def _invalid(problems: list[dict[str, Any]]) -> ValidationFailed:
    """The same envelope FastAPI's own validation produces, so clients parse one shape."""
    return ValidationFailed("The request is invalid", details={"errors": problems})


def _from_pydantic(exc: ValidationError, prefix: list[str]) -> ValidationFailed:
    return _invalid(
        [_problem([*prefix, *(str(p) for p in err["loc"])], str(err["msg"]), str(err["type"])) for err in exc.errors()]
    )


def _own_endpoint(provider: str, credential: AiProviderCredential | None) -> bool:
    """An OpenAI key of this version pointed at its own server (``base_url``: a local model, a
    proxy): the models it serves are not the catalog's, so their names cannot be checked here."""
    return (
        provider == LlmProvider.OPENAI.value
        and credential is not None
        and credential.provider == LlmProvider.OPENAI.value
        and credential.is_active
        and bool(credential.base_url)
    )


def check_references(
    session: Session,
    org_id: uuid.UUID,
    config: VersionConfig,
    *,
    prefix: list[str],
    agent_id: uuid.UUID | None = None,
) -> None:
    """What pydantic cannot know: model and tools are in the catalogs, the credential and channel are this org's."""
    problems: list[dict[str, Any]] = []
    model = repository.catalog_model(session, config.provider.value, config.model)
    credential = (
        repository.credential(session, org_id, config.credential_id) if config.credential_id is not None else None
    )
    if model is None and _own_endpoint(config.provider.value, credential):
        pass  # a model of the key's own OpenAI-compatible server: any name it serves, no catalog price
    elif model is None:
        problems.append(
            _problem(
                [*prefix, "model"],
                f"{config.model!r} is not a {config.provider.value} model of the catalog",
                "unknown_model",
            )
        )
    elif model.deprecated_at is not None:
        problems.append(
            _problem([*prefix, "model"], f"{config.model!r} is deprecated; choose another model", "deprecated_model")
        )
    if config.credential_id is not None:
        # Another org's credential reads exactly like a missing one: nothing is confirmed.
        if credential is None:
            problems.append(_problem([*prefix, "credential_id"], "No such credential", "unknown_credential"))
        elif config.provider is LlmProvider.DEMO or credential.provider != config.provider.value:
            problems.append(
                _problem(
                    [*prefix, "credential_id"],
                    f"The credential is for {credential.provider}, not {config.provider.value}",
                    "credential_provider_mismatch",
                )
            )
        elif not credential.is_active:
            problems.append(_problem([*prefix, "credential_id"], "The credential is not active", "inactive_credential"))
    for index, tool in enumerate(config.tool_ids):
        if not _grantable(tool):
            problems.append(
                _problem([*prefix, "tool_ids", str(index)], f"{tool!r} is not a tool of the catalog", "unknown_tool")
            )
    channel_id = config.channel_session_id
    channel = repository.channel_session(session, org_id, channel_id) if channel_id is not None else None
    if channel_id is not None and channel is None:
        problems.append(_problem([*prefix, "channel_session_id"], "No such channel session", "unknown_channel_session"))
    elif channel is not None and channel.archived_at is not None:
        problems.append(
            _problem([*prefix, "channel_session_id"], "The channel session is archived", "archived_channel_session")
        )
    problems += _subagent_problems(session, org_id, config.subagent_ids, [*prefix, "subagent_ids"], agent_id)
    if problems:
        raise _invalid(problems)


def _subagent_problems(
    session: Session, org_id: uuid.UUID, ids: list[uuid.UUID], loc: list[str], agent_id: uuid.UUID | None
) -> list[dict[str, Any]]:
    """Issue 6 item 9: each sub-agent is another agent of this org with a published version (another
    org's agent reads like a missing one)."""
    problems: list[dict[str, Any]] = []
    for index, sub_id in enumerate(ids):
        where = [*loc, str(index)]
        if sub_id == agent_id:
            problems.append(_problem(where, "An agent cannot be its own sub-agent", "subagent_self"))
            continue
        sub = repository.agent(session, org_id, sub_id)
        if sub is None or sub.archived_at is not None:
            problems.append(_problem(where, "No such agent", "unknown_subagent"))
        elif sub.published_version_id is None:
            problems.append(_problem(where, "The agent has no published version", "subagent_not_published"))
    return problems


def _columns(session: Session, org_id: uuid.UUID, config: VersionConfig) -> dict[str, Any]:
    """The version's columns; business hours without a zone are in the org's zone [SPEC §5], written
    out so that a later change of the org's zone does not move an agent's hours silently."""
    trigger = config.trigger_config.model_dump(mode="json")
    hours = trigger.get("business_hours")
    if hours is not None and hours.get("time_zone") is None:
        hours["time_zone"] = repository.org_time_zone(session, org_id)
    return {
        "system_prompt": config.system_prompt,
        "persona": config.persona,
        "skills": list(config.skills),
        "provider": config.provider.value,
        "model": config.model,
        "credential_id": config.credential_id,
        "tool_ids": list(config.tool_ids),
        "trigger_config": trigger,
        "channel_session_id": config.channel_session_id,
        "max_steps": config.max_steps,
        "token_budget": config.token_budget,
        "cost_budget_micros": config.cost_budget_cents * MICROS_PER_CENT,
        "history_message_window": config.history_message_window,
        "history_token_window": config.history_token_window,
        "silence_timeout_minutes": config.silence_timeout_minutes,
        "pause_on_proposal": config.pause_on_proposal,
        "subagent_ids": list(config.subagent_ids),
        "classification_enabled": config.classification_enabled,
        "handoff_keywords": list(config.handoff_keywords),
        "handoff_tool_enabled": config.handoff_tool_enabled,
        "handoff_message": config.handoff_message,
        "followup": config.followup.model_dump(mode="json"),
        "concurrency_policy": config.concurrency_policy.value,
    }


def merge(current: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """Objects merge property by property, recursively; anything else (lists, scalars, null) replaces."""
    merged = dict(current)
    for key, value in patch.items():
        base = merged.get(key)
        merged[key] = merge(base, value) if isinstance(base, Mapping) and isinstance(value, Mapping) else value
    return merged


# --------------------------------------------------------------------------- helpers


def _live_agent(session: Session, org_id: uuid.UUID, agent_id: uuid.UUID) -> AiAgent:
    """The locked agent, refusing archived ones (they keep history but change no more)."""
    agent = agent_lifecycle.lock_agent(session, org_id, agent_id)
    if agent is None:
        raise NotFound("No such agent")
    if agent.archived_at is not None:
        raise Conflict("The agent is archived", details={"reason": "agent_archived"})
    return agent


def _emit(
    session: Session,
    serde: Serde,
    *,
    agent: AiAgent,
    change: PublishedChange,
    version: AiAgentVersion | None,
    previous_version_id: uuid.UUID | None,
    actor_user_id: uuid.UUID | None,
    request_id: str | None,
) -> AgentPublished:
    record = AgentPublished(
        org_id=agent.org_id,
        request_id=request_id or None,
        agent_id=agent.id,
        change=change,
        version=None if version is None else snapshot(agent, version),
        previous_version_id=previous_version_id,
        changed_by_user_id=actor_user_id,
    )
    enqueue_record(session, Topics.PUBLISHED, record, serde=serde)
    return record


def _new_version(
    session: Session,
    *,
    org_id: uuid.UUID,
    agent_id: uuid.UUID,
    number: int,
    columns: Mapping[str, Any],
    actor_user_id: uuid.UUID | None,
) -> AiAgentVersion:
    version = AiAgentVersion(
        org_id=org_id,
        agent_id=agent_id,
        version_number=number,
        status=AgentVersionStatus.DRAFT.value,
        created_by=actor_user_id,
        **columns,
    )
    session.add(version)
    session.flush()
    return version


# --------------------------------------------------------------------------- agents


def create_agent(
    session: Session, *, org_id: uuid.UUID, actor_user_id: uuid.UUID | None, request_id: str | None, body: AgentCreate
) -> AgentWithVersion:
    """A new ``mcp_agent`` with its first draft (version 1) [004 §4.3]."""
    check_references(session, org_id, body.version, prefix=["body", "version"])
    agent = AiAgent(
        org_id=org_id,
        name=body.name,
        description=body.description,
        priority=body.priority,
        kind=AgentKind.MCP_AGENT.value,
        created_by=actor_user_id,
    )
    session.add(agent)
    session.flush()
    version = _new_version(
        session,
        org_id=org_id,
        agent_id=agent.id,
        number=1,
        columns=_columns(session, org_id, body.version),
        actor_user_id=actor_user_id,
    )
    record_audit(
        session,
        org_id=org_id,
        action="ai_agent.created",
        actor_user_id=actor_user_id,
        target_type="ai_agent",
        target_id=agent.id,
        request_id=request_id,
        details={
            "name": agent.name,
            "priority": agent.priority,
            "version_id": version.id,
            "version_number": 1,
            "provider": version.provider,
            "model": version.model,
        },
    )
    return AgentWithVersion(agent=agent_view(session, org_id, agent), version=version_view(version))


def get_agent(session: Session, *, org_id: uuid.UUID, agent_id: uuid.UUID) -> AgentView:
    agent = repository.agent(session, org_id, agent_id)
    if agent is None:
        raise NotFound("No such agent")
    return agent_view(session, org_id, agent)


def update_agent(
    session: Session,
    serde: Serde,
    *,
    org_id: uuid.UUID,
    agent_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    request_id: str | None,
    body: AgentPatch,
) -> AgentView:
    """Name, description, priority. A live agent's new name or priority is published too:
    the dispatcher ranks by the snapshot, never by a database query."""
    sent = body.model_dump(exclude_unset=True)
    nulls = [key for key in ("name", "priority") if key in sent and sent[key] is None]
    if nulls:
        raise _invalid([_problem(["body", key], "Input should not be null", "null_not_allowed") for key in nulls])
    agent = _live_agent(session, org_id, agent_id)
    changes = {k: v for k, v in sent.items() if getattr(agent, k) != v}
    for key, value in changes.items():
        setattr(agent, key, value)
    if changes:
        session.flush()
        record_audit(
            session,
            org_id=org_id,
            action="ai_agent.updated",
            actor_user_id=actor_user_id,
            target_type="ai_agent",
            target_id=agent.id,
            request_id=request_id,
            details={"changes": changes},
        )
        if agent.published_version_id is not None and ({"name", "priority"} & changes.keys()):
            live = repository.version(session, org_id, agent.id, agent.published_version_id)
            if live is not None:
                _emit(
                    session,
                    serde,
                    agent=agent,
                    change=PublishedChange.PUBLISHED,
                    version=live,
                    previous_version_id=live.id,
                    actor_user_id=actor_user_id,
                    request_id=request_id,
                )
    return agent_view(session, org_id, agent)


def list_agents(
    session: Session,
    *,
    org_id: uuid.UUID,
    limit: int,
    before: tuple[datetime, uuid.UUID] | None,
    status: AgentStatus | None,
    kind: AgentKind | None,
    include_archived: bool,
) -> tuple[list[AgentView], bool]:
    """One page and whether more follow (the caller fetched ``limit + 1`` to know)."""
    rows = repository.agents(
        session,
        org_id,
        limit=limit + 1,
        before=before,
        status=status,
        kind=None if kind is None else kind.value,
        include_archived=include_archived,
    )
    return agent_views(session, org_id, rows[:limit]), len(rows) > limit


def archive_agent(
    session: Session,
    serde: Serde,
    *,
    org_id: uuid.UUID,
    agent_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    request_id: str | None,
) -> None:
    """Soft delete: the agent stops answering and keeps its versions and runs for history."""
    agent = agent_lifecycle.lock_agent(session, org_id, agent_id)
    if agent is None:
        raise NotFound("No such agent")
    if agent.archived_at is not None:
        raise Conflict("The agent is already archived", details={"reason": "agent_archived"})
    now = repository.clock_now(session)
    previous = agent.published_version_id
    agent_lifecycle.supersede_published(session, org_id, agent.id, at=now)
    agent.published_version_id = None
    agent.archived_at = now
    session.flush()
    last = repository.last_published_version(session, org_id, agent.id)
    record_audit(
        session,
        org_id=org_id,
        action="ai_agent.archived",
        actor_user_id=actor_user_id,
        target_type="ai_agent",
        target_id=agent.id,
        request_id=request_id,
        details={"previous_version_id": previous},
    )
    _emit(
        session,
        serde,
        agent=agent,
        change=PublishedChange.ARCHIVED,
        version=last,
        previous_version_id=previous,
        actor_user_id=actor_user_id,
        request_id=request_id,
    )


def pause_agent(
    session: Session,
    serde: Serde,
    *,
    org_id: uuid.UUID,
    agent_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    request_id: str | None,
) -> AgentView:
    """Stop answering [004 §4.3: clear published_version_id]; publishing a version again resumes."""
    agent = _live_agent(session, org_id, agent_id)
    if agent.published_version_id is None:
        raise Conflict("The agent has no published version to pause", details={"reason": "not_published"})
    agent_lifecycle.pause_agent(
        session,
        serde,
        agent,
        reason=AgentPauseReason.MANUAL,
        audit_action="ai_agent.paused",
        actor_user_id=actor_user_id,
        request_id=request_id,
        snapshot=snapshot,
    )
    return agent_view(session, org_id, agent)


def duplicate_agent(
    session: Session,
    *,
    org_id: uuid.UUID,
    agent_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    request_id: str | None,
    name: str | None,
) -> AgentWithVersion:
    """A new agent whose version 1 is a draft copy of the source's latest version (any status)."""
    source = repository.agent(session, org_id, agent_id)
    if source is None:
        raise NotFound("No such agent")
    latest = repository.latest_version(session, org_id, source.id)
    if latest is None:
        raise Conflict("The agent has no version to copy", details={"reason": "no_version"})
    agent = AiAgent(
        org_id=org_id,
        name=name or f"{source.name} (copy)"[:200],
        description=source.description,
        priority=source.priority,
        kind=source.kind,
        created_by=actor_user_id,
    )
    session.add(agent)
    session.flush()
    version = _new_version(
        session, org_id=org_id, agent_id=agent.id, number=1, columns=_copyable(latest), actor_user_id=actor_user_id
    )
    record_audit(
        session,
        org_id=org_id,
        action="ai_agent.duplicated",
        actor_user_id=actor_user_id,
        target_type="ai_agent",
        target_id=agent.id,
        request_id=request_id,
        details={
            "source_agent_id": source.id,
            "source_version_id": latest.id,
            "source_version_number": latest.version_number,
            "version_id": version.id,
        },
    )
    return AgentWithVersion(agent=agent_view(session, org_id, agent), version=version_view(version))


def _copyable(version: AiAgentVersion) -> dict[str, Any]:
    """The configuration columns of a version, as stored (no re-validation: a copy is a draft)."""
    return {
        "system_prompt": version.system_prompt,
        "persona": version.persona,
        "skills": list(version.skills),
        "provider": version.provider,
        "model": version.model,
        "credential_id": version.credential_id,
        "tool_ids": list(version.tool_ids),
        "trigger_config": dict(version.trigger_config),
        "channel_session_id": version.channel_session_id,
        "max_steps": version.max_steps,
        "token_budget": version.token_budget,
        "cost_budget_micros": version.cost_budget_micros,
        "history_message_window": version.history_message_window,
        "history_token_window": version.history_token_window,
        "silence_timeout_minutes": version.silence_timeout_minutes,
        "pause_on_proposal": version.pause_on_proposal,
        "subagent_ids": list(version.subagent_ids),
        "classification_enabled": version.classification_enabled,
        "handoff_keywords": list(version.handoff_keywords),
        "handoff_tool_enabled": version.handoff_tool_enabled,
        "handoff_message": version.handoff_message,
        "followup": dict(version.followup),
        "concurrency_policy": version.concurrency_policy,
    }


def publish_version(
    session: Session,
    serde: Serde,
    *,
    org_id: uuid.UUID,
    agent_id: uuid.UUID,
    version_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    request_id: str | None,
) -> AgentWithVersion:
    """The atomic switch of [004 §4.5], in the request's one transaction.

    Lock the agent; check the version and what it references; previous published
    version(s) -> superseded; chosen -> published; pointer switched; audit entry;
    ``published`` record in the outbox. A concurrent publish of the same agent
    waits on the lock and then sees this one's result.
    """
    agent = _live_agent(session, org_id, agent_id)
    version = repository.version(session, org_id, agent.id, version_id, lock=True)
    if version is None:
        raise NotFound("No such version of this agent")
    if version.status not in PUBLISHABLE_STATUSES:
        raise Conflict(
            f"A {version.status} version cannot be published",
            details={"reason": "version_not_publishable", "status": version.status},
        )
    _check_publishable(session, org_id, version)
    now = repository.clock_now(session)
    previous = agent.published_version_id
    # Superseded first (and flushed), so the one-published-per-agent index never sees two.
    agent_lifecycle.supersede_published(session, org_id, agent.id, at=now, keep=version.id)
    version.status = AgentVersionStatus.PUBLISHED.value
    version.published_at = now
    version.superseded_at = None
    agent.published_version_id = version.id
    agent.paused_at = None
    agent.pause_reason = None
    session.flush()
    record_audit(
        session,
        org_id=org_id,
        action="ai_agent.published",
        actor_user_id=actor_user_id,
        target_type="ai_agent",
        target_id=agent.id,
        request_id=request_id,
        details={
            "version_id": version.id,
            "version_number": version.version_number,
            "previous_version_id": previous,
        },
    )
    _emit(
        session,
        serde,
        agent=agent,
        change=PublishedChange.PUBLISHED,
        version=version,
        previous_version_id=previous,
        actor_user_id=actor_user_id,
        request_id=request_id,
    )
    return AgentWithVersion(agent=agent_view(session, org_id, agent), version=version_view(version))


def _check_publishable(session: Session, org_id: uuid.UUID, version: AiAgentVersion) -> None:
    """Steps 2-4 of [004 §4.5] (and the model): what the version references must still be usable now."""
    model = repository.catalog_model(session, version.provider, version.model)
    credential = (
        repository.credential(session, org_id, version.credential_id) if version.credential_id is not None else None
    )
    own_endpoint = model is None and _own_endpoint(version.provider, credential)
    if not own_endpoint and (model is None or model.deprecated_at is not None):
        raise Conflict(
            f"The model {version.model!r} is no longer available; save a version with another model",
            details={"reason": "model_unavailable"},
        )
    if version.credential_id is not None and (credential is None or not credential.is_active):
        raise Conflict("The version's credential is not active", details={"reason": "credential_inactive"})
    unknown = [tool for tool in version.tool_ids if not _grantable(tool)]
    if unknown:
        raise Conflict(
            "The version grants tools the catalog no longer has; save a version without them",
            details={"reason": "unknown_tools", "tool_ids": unknown},
        )
    if version.channel_session_id is None:
        raise Conflict(
            "A version needs a channel_session_id to be published", details={"reason": "channel_session_required"}
        )
    channel = repository.channel_session(session, org_id, version.channel_session_id)
    if channel is None or channel.status not in PUBLISHABLE_SESSION_STATUSES:
        raise Conflict(
            "The version's channel session is not connected (status must be 'working')",
            details={"reason": "channel_session_not_working", "status": None if channel is None else channel.status},
        )


# --------------------------------------------------------------------------- versions


def _agent_or_404(session: Session, org_id: uuid.UUID, agent_id: uuid.UUID) -> AiAgent:
    agent = repository.agent(session, org_id, agent_id)
    if agent is None:
        raise NotFound("No such agent")
    return agent


def encode_version_cursor(number: int) -> str:
    return base64.urlsafe_b64encode(json.dumps(["v", number]).encode()).decode().rstrip("=")


def decode_version_cursor(cursor: str | None) -> int | None:
    if not cursor:
        return None
    try:
        tag, number = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        if tag != "v" or not isinstance(number, int):
            raise ValueError(cursor)
    except (ValueError, TypeError) as exc:
        raise ValidationFailed("The cursor is not one this API issued", details={"field": "cursor"}) from exc
    return number


def list_versions(
    session: Session, *, org_id: uuid.UUID, agent_id: uuid.UUID, limit: int, cursor: str | None
) -> tuple[list[VersionView], str | None]:
    below = decode_version_cursor(cursor)
    _agent_or_404(session, org_id, agent_id)
    rows = repository.versions(session, org_id, agent_id, limit=limit + 1, below_number=below)
    page = rows[:limit]
    next_cursor = encode_version_cursor(page[-1].version_number) if len(rows) > limit else None
    return [version_view(v) for v in page], next_cursor


def get_version(session: Session, *, org_id: uuid.UUID, agent_id: uuid.UUID, version_id: uuid.UUID) -> VersionView:
    version = repository.version(session, org_id, agent_id, version_id)
    if version is None:
        raise NotFound("No such version of this agent")
    return version_view(version)


def save_version(
    session: Session,
    *,
    org_id: uuid.UUID,
    agent_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    request_id: str | None,
    body: VersionConfig,
) -> VersionView:
    """Save = a new draft from a full configuration, numbered max + 1 [004 §4.4]."""
    agent = _live_agent(session, org_id, agent_id)
    check_references(session, org_id, body, prefix=["body"], agent_id=agent.id)
    number = repository.next_version_number(session, org_id, agent.id)
    version = _new_version(
        session,
        org_id=org_id,
        agent_id=agent.id,
        number=number,
        columns=_columns(session, org_id, body),
        actor_user_id=actor_user_id,
    )
    record_audit(
        session,
        org_id=org_id,
        action="ai_agent_version.saved",
        actor_user_id=actor_user_id,
        target_type="ai_agent_version",
        target_id=version.id,
        request_id=request_id,
        details={"agent_id": agent.id, "version_number": number, "provider": version.provider, "model": version.model},
    )
    return version_view(version)


def patch_version(
    session: Session,
    *,
    org_id: uuid.UUID,
    agent_id: uuid.UUID,
    version_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    request_id: str | None,
    body: VersionPatch,
) -> VersionView:
    """Edit a draft in place; anything else is immutable (save a new version instead)."""
    agent = _live_agent(session, org_id, agent_id)
    version = repository.version(session, org_id, agent.id, version_id, lock=True)
    if version is None:
        raise NotFound("No such version of this agent")
    if version.status != AgentVersionStatus.DRAFT.value:
        raise Conflict(
            f"Only drafts can be edited; this version is {version.status}. Save a new version instead.",
            details={"reason": "version_not_draft", "status": version.status},
        )
    sent = body.model_dump(mode="json", exclude_unset=True)
    if not sent:
        return version_view(version)
    try:
        config = VersionConfig.model_validate(merge(_config_dict(version), sent))
    except ValidationError as exc:
        raise _from_pydantic(exc, ["body"]) from exc
    check_references(session, org_id, config, prefix=["body"], agent_id=agent.id)
    before = _copyable(version)
    after = _columns(session, org_id, config)
    changed = sorted(k for k, v in after.items() if before.get(k) != v)
    for key in changed:
        setattr(version, key, after[key])
    if changed:
        session.flush()
        record_audit(
            session,
            org_id=org_id,
            action="ai_agent_version.updated",
            actor_user_id=actor_user_id,
            target_type="ai_agent_version",
            target_id=version.id,
            request_id=request_id,
            # Field names only: prompts are long and belong to the version, not the audit log.
            details={"agent_id": agent.id, "version_number": version.version_number, "fields": changed},
        )
    return version_view(version)
