"""The published agents, indexed for selection: no database query per message.

Fed with every record of the compacted ``published`` topic (``published_feed.py``), in
offset order: a ``published`` record makes its version the agent's answering version; a
``paused`` or ``archived`` record removes the agent from selection. The index keeps, per
(org, channel session), the candidates in dispatch order: priority desc, then the
agent's creation time asc, then agent id (a total order, so ties never depend on the
order records arrived in) [004 §1.2, D3].

Pure data structure: no broker import.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from switchboard.contracts import AgentPublished, AgentVersionSnapshot, PublishedChange

CandidateKey = tuple[uuid.UUID, uuid.UUID]  # (org id, channel session id)


def dispatch_order(snapshot: AgentVersionSnapshot) -> tuple[int, float, str]:
    """Sort key of candidates: priority desc, then agent created_at asc, then agent id."""
    return (-snapshot.priority, snapshot.agent_created_at.timestamp(), str(snapshot.agent_id))


class AgentIndex:
    """Published, unarchived, unpaused agents by (org, channel session), in dispatch order."""

    def __init__(self) -> None:
        self._by_agent: dict[uuid.UUID, tuple[uuid.UUID, AgentVersionSnapshot]] = {}
        self._by_session: dict[CandidateKey, list[AgentVersionSnapshot]] = {}
        self.records_applied = 0

    def __len__(self) -> int:
        return len(self._by_agent)

    def apply(self, record: AgentPublished) -> None:
        """Apply one ``published`` record (idempotent: the latest record of an agent wins)."""
        self.records_applied += 1
        self._remove(record.agent_id)
        version = record.version
        if record.change is not PublishedChange.PUBLISHED or version is None:
            return
        if version.agent_id != record.agent_id:
            return  # a malformed snapshot never becomes a candidate
        self._by_agent[record.agent_id] = (record.org_id, version)
        key = (record.org_id, version.channel_session_id)
        bucket = self._by_session.setdefault(key, [])
        bucket.append(version)
        bucket.sort(key=dispatch_order)

    def _remove(self, agent_id: uuid.UUID) -> None:
        previous = self._by_agent.pop(agent_id, None)
        if previous is None:
            return
        org_id, version = previous
        key = (org_id, version.channel_session_id)
        bucket = [v for v in self._by_session.get(key, ()) if v.agent_id != agent_id]
        if bucket:
            self._by_session[key] = bucket
        else:
            self._by_session.pop(key, None)

    def candidates(self, org_id: uuid.UUID, channel_session_id: uuid.UUID) -> Sequence[AgentVersionSnapshot]:
        """Answering versions bound to this org's channel session, in dispatch order."""
        return self._by_session.get((org_id, channel_session_id), ())

    def agent(self, org_id: uuid.UUID, agent_id: uuid.UUID) -> AgentVersionSnapshot | None:
        """The answering version of one agent of this org, or None (unknown, paused, archived)."""
        entry = self._by_agent.get(agent_id)
        if entry is None or entry[0] != org_id:
            return None
        return entry[1]
