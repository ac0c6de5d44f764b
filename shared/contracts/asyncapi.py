"""The AsyncAPI 3.0 document of memoryd's NATS interface, generated from the contracts.

Channels are the subjects (their tokens as parameters), messages the pydantic contracts (their
JSON Schemas under ``components.schemas``), with the ``Nats-Msg-Id`` header an event carries.
Operations say who sends what: an app publishes events and requests recall, list-memories and
browse (the reply comes to its inbox), and receives notifications. ``memoryd schemas`` writes it to
``schemas/asyncapi.json``; a test fails when the file drifts from the contracts.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from memoryd.shared import subjects
from memoryd.shared.contracts.browse import BrowseError, BrowseRequest, UserMemory
from memoryd.shared.contracts.catalog import EVENT_TYPES
from memoryd.shared.contracts.events import type_name
from memoryd.shared.contracts.memories import ListMemoriesError, ListMemoriesRequest, MemoryList
from memoryd.shared.contracts.notifications import NOTIFICATION_TYPES
from memoryd.shared.contracts.recall import RecallError, RecallRequest, RecallResponse

REF = "#/components/schemas/{model}"
MSG_ID_HEADER = "Nats-Msg-Id"  # an event's id: JetStream's de-duplication key
TOKEN = "letters, digits, '-' or '_' (1-64): a scope value"


def _message(model: type[BaseModel], name: str, summary: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "title": model.__name__,
        "summary": summary,
        "contentType": "application/json",
        "payload": {"$ref": REF.format(model=model.__name__)},
        **extra,
    }


def _event_messages() -> dict[str, Any]:
    headers = {
        "type": "object",
        "required": [MSG_ID_HEADER],
        "properties": {
            MSG_ID_HEADER: {
                "type": "string",
                "description": "the event's event_id: the stream stores an id once, so a "
                "publish retried with the same id is never doubled",
            }
        },
    }
    return {
        type_name(model): _message(
            model,
            type_name(model),
            (model.__doc__ or model.__name__).strip().splitlines()[0],
            headers=headers,
        )
        for model in EVENT_TYPES
    }


def _notification_messages() -> dict[str, Any]:
    return {
        f"notification.{model.contract_name()}": _message(
            model,
            f"notification.{model.contract_name()}",
            (model.__doc__ or model.__name__).strip().splitlines()[0],
        )
        for model in NOTIFICATION_TYPES
    }


def _parameters(*names: str, **enums: list[str]) -> dict[str, Any]:
    described = {
        "tenant": "the tenant (what per-tenant credentials grant): " + TOKEN,
        "user": "the user: " + TOKEN,
        "eventType": "the event's versioned type with '.' as '_', e.g. turn_recorded_v1",
        "kind": "the notification's kind with '.' as '_', e.g. page_added",
        "eventId": "the id of the event that became recallable",
    }
    out: dict[str, Any] = {}
    for name in names:
        out[name] = {"description": described[name]}
        if name in enums:
            out[name]["enum"] = enums[name]
    return out


def _refs(names: list[str]) -> dict[str, Any]:
    return {name: {"$ref": f"#/components/messages/{name}"} for name in names}


def asyncapi_document() -> dict[str, Any]:
    """Return the AsyncAPI 3.0 document of the NATS interface."""
    events, notes = _event_messages(), _notification_messages()
    rpc = {
        "RecallRequest": _message(RecallRequest, "RecallRequest", "a recall request"),
        "RecallResponse": _message(RecallResponse, "RecallResponse", "the memory context"),
        "RecallError": _message(RecallError, "RecallError", "why recall did not answer"),
        "ListMemoriesRequest": _message(
            ListMemoriesRequest, "ListMemoriesRequest", "a page of a scope's memories"
        ),
        "MemoryList": _message(MemoryList, "MemoryList", "the page"),
        "ListMemoriesError": _message(ListMemoriesError, "ListMemoriesError", "why not"),
        "BrowseRequest": _message(BrowseRequest, "BrowseRequest", "everything held of a user"),
        "UserMemory": _message(UserMemory, "UserMemory", "the user's memory, tier by tier"),
        "BrowseError": _message(BrowseError, "BrowseError", "why not"),
    }
    models: list[type[BaseModel]] = [*EVENT_TYPES, *NOTIFICATION_TYPES]
    models += [RecallRequest, RecallResponse, RecallError]
    models += [ListMemoriesRequest, MemoryList, ListMemoriesError]
    models += [BrowseRequest, UserMemory, BrowseError]
    _, top = models_json_schema([(m, "validation") for m in models], ref_template=REF)
    event_tokens = [subjects.type_token(type_name(m)) for m in EVENT_TYPES]
    kinds = [m.kind_name().replace(".", "_") for m in NOTIFICATION_TYPES]
    kinds = [kind for kind in kinds if kind != subjects.RECALLABLE_KIND]
    channels = {
        "events": {
            "address": f"{subjects.EVENTS_PREFIX}.{{tenant}}.{{user}}.{{eventType}}",
            "title": "The event log (JetStream stream MEMORYD)",
            "description": "Publish with a JetStream publish (a request whose reply is the "
            "stream's acknowledgement) and the event id as Nats-Msg-Id. The scope in the "
            "payload must name the subject's tenant and user, or the event is dead-lettered.",
            "parameters": _parameters("tenant", "user", "eventType", eventType=event_tokens),
            "messages": _refs(list(events)),
        },
        "notifications": {
            "address": f"{subjects.NOTIFY_PREFIX}.{{tenant}}.{{user}}.{{kind}}",
            "title": "Memory-updated notifications (also kept in the stream MEMORYD_NOTIFY)",
            "parameters": _parameters("tenant", "user", "kind", kind=kinds),
            "messages": _refs([n for n in notes if not n.startswith("notification.recallable")]),
        },
        "recallable": {
            "address": f"{subjects.NOTIFY_PREFIX}.{{tenant}}.{{user}}."
            f"{subjects.RECALLABLE_KIND}.{{eventId}}",
            "title": "An event every projection recall reads has applied",
            "parameters": _parameters("tenant", "user", "eventId"),
            "messages": _refs([n for n in notes if n.startswith("notification.recallable")]),
        },
        "recall": {
            "address": f"{subjects.RPC_PREFIX}.{{tenant}}.{subjects.RECALL_SUFFIX}",
            "title": "Recall request-reply (a queue group of recall services)",
            "parameters": _parameters("tenant"),
            "messages": _refs(["RecallRequest"]),
        },
        "recallReply": {
            "address": None,
            "title": "The recall reply, sent to the request's reply inbox",
            "messages": _refs(["RecallResponse", "RecallError"]),
        },
        "listMemories": {
            "address": f"{subjects.RPC_PREFIX}.{{tenant}}.{subjects.LIST_MEMORIES_SUFFIX}",
            "title": "List a scope's explicit memories (request-reply)",
            "parameters": _parameters("tenant"),
            "messages": _refs(["ListMemoriesRequest"]),
        },
        "listMemoriesReply": {
            "address": None,
            "title": "The list reply, sent to the request's reply inbox",
            "messages": _refs(["MemoryList", "ListMemoriesError"]),
        },
        "browse": {
            "address": f"{subjects.RPC_PREFIX}.{{tenant}}.{subjects.BROWSE_SUFFIX}",
            "title": "Everything held of one user, tier by tier (request-reply, read-only)",
            "parameters": _parameters("tenant"),
            "messages": _refs(["BrowseRequest"]),
        },
        "browseReply": {
            "address": None,
            "title": "The browse reply, sent to the request's reply inbox",
            "messages": _refs(["UserMemory", "BrowseError"]),
        },
    }
    reply_inbox = {"location": "$message.header#/reply", "description": "the request's inbox"}
    operations = {
        "publishEvent": {
            "action": "send",
            "channel": {"$ref": "#/channels/events"},
            "summary": "append an event to the log (turns, memories, forgets, session ends)",
        },
        "receiveNotification": {
            "action": "receive",
            "channel": {"$ref": "#/channels/notifications"},
            "summary": "be told what changed in a user's memory",
        },
        "receiveRecallable": {
            "action": "receive",
            "channel": {"$ref": "#/channels/recallable"},
            "summary": "be told a published event can now be recalled",
        },
        "recall": {
            "action": "send",
            "channel": {"$ref": "#/channels/recall"},
            "summary": "ask for the token-budgeted memory context of a question",
            "reply": {"channel": {"$ref": "#/channels/recallReply"}, "address": reply_inbox},
        },
        "listMemories": {
            "action": "send",
            "channel": {"$ref": "#/channels/listMemories"},
            "summary": "read a page of a scope's explicit memories",
            "reply": {"channel": {"$ref": "#/channels/listMemoriesReply"}, "address": reply_inbox},
        },
        "browse": {
            "action": "send",
            "channel": {"$ref": "#/channels/browse"},
            "summary": "read what memoryd holds of one user (the memory browser's view)",
            "reply": {"channel": {"$ref": "#/channels/browseReply"}, "address": reply_inbox},
        },
    }
    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "memoryd",
            "version": "1",
            "description": "Long-term memory for LLM agents over NATS: publish events, "
            "receive notifications, request recall. Generated from the pydantic contracts.",
        },
        "defaultContentType": "application/json",
        "servers": {
            "embedded": {
                "host": "127.0.0.1:14222",
                "protocol": "nats",
                "description": "`memoryd up`'s embedded nats-server (MEMORYD_EMBEDDED_NATS_PORT)",
            }
        },
        "channels": channels,
        "operations": operations,
        "components": {
            "messages": {**events, **notes, **rpc},
            "schemas": top.get("$defs", {}),
        },
    }
