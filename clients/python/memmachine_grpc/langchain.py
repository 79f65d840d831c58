"""LangChain chat history on memmachine: `pip install memmachine-grpc[langchain]`."""

from __future__ import annotations

from collections.abc import Sequence

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from .client import Memory
from .models import Message

_ROLES = {"human": "user", "ai": "assistant", "system": "system"}


class MemMachineChatMessageHistory(BaseChatMessageHistory):
    """One conversation's messages, kept as episodes of the client's project whose
    metadata names the session (`m.session = '<session_id>'`)."""

    def __init__(self, memory: Memory, session_id: str, *, producer: str = "user") -> None:
        self.memory = memory
        self.session_id = session_id
        self.producer = producer

    def _filter(self) -> str:
        quoted = self.session_id.replace("\\", "\\\\").replace("'", "\\'")
        return f"m.session = '{quoted}'"

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        out: list[BaseMessage] = []
        for e in self.memory.list(filter=self._filter()):
            if e.role == "assistant":
                out.append(AIMessage(content=e.content))
            elif e.role == "system":
                out.append(SystemMessage(content=e.content))
            else:
                out.append(HumanMessage(content=e.content))
        return out

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        self.memory.add_many(
            Message(
                m.text,
                producer=self.producer if m.type == "human" else m.type,
                role=_ROLES.get(m.type, m.type),
                metadata={"session": self.session_id},
            )
            for m in messages
        )

    def clear(self) -> None:
        uids = [e.uid for e in self.memory.list(filter=self._filter())]
        if uids:
            self.memory.delete(uids)
