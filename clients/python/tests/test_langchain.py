"""The LangChain chat history adapter against the real server."""

from __future__ import annotations

from langchain_core.messages import AIMessage, HumanMessage

from memmachine_grpc import Memory
from memmachine_grpc.langchain import MemMachineChatMessageHistory


def test_chat_history_round_trip(mem: Memory) -> None:
    history = MemMachineChatMessageHistory(mem, "chat-1")
    other = MemMachineChatMessageHistory(mem, "chat-2")
    history.add_messages([HumanMessage("my dog is called Max"), AIMessage("Nice name!")])
    other.add_user_message("unrelated")
    got = history.messages
    assert [(type(m).__name__, m.content) for m in got] == [
        ("HumanMessage", "my dog is called Max"), ("AIMessage", "Nice name!")]
    # The messages are memories too: found by search.
    assert mem.search("dog Max").episodes[0].episode.content == "my dog is called Max"
    history.clear()
    assert history.messages == []
    assert [m.content for m in other.messages] == ["unrelated"]
