"""The names a checkpoint gives its types: tags, not module paths.

LangGraph's msgpack serializer names each object's type by its module and class, and
rebuilds it by importing that module: a type that moved, or a package renamed, left the
stores naming it unreadable. Here each type the loop's state holds has an explicit tag,
``warpsmith/NAME`` (state.STATE_TAGS, and the serializer's own Stored), written where
LangGraph's format keeps the module and the class: ("warpsmith", NAME). A tag stays when
its type moves.

Reading imports nothing: a tag, or the module path a store from before the tags wrote
(legacy_names), names its class in the table; any other type is read by LangGraph's own
serializer, which rebuilds only its safe types."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Mapping

import ormsgpack
from langgraph.checkpoint.serde.jsonplus import (
    EXT_CONSTRUCTOR_KW_ARGS,
    EXT_CONSTRUCTOR_SINGLE_ARG,
    EXT_PYDANTIC_V2,
    JsonPlusSerializer,
)
from pydantic import BaseModel, ValidationError

from .legacy_names import LEGACY_TAGS

SPACE = "warpsmith"  # a tag is SPACE/NAME
TYPED_EXTS = (EXT_PYDANTIC_V2, EXT_CONSTRUCTOR_SINGLE_ARG, EXT_CONSTRUCTOR_KW_ARGS)  # (module, name, data, ...)
_LANGGRAPH = JsonPlusSerializer(allowed_msgpack_modules=None)  # the msgpack format, and its own safe types only


class Tags:
    """`tags`: each tag (warpsmith/NAME) and its class, a pydantic model, an enum or a dataclass."""

    def __init__(self, tags: Mapping[str, type]):
        bad = [tag for tag in tags if tag.partition("/")[0] != SPACE or not tag.partition("/")[2]]
        if bad or len(set(tags.values())) != len(tags):
            raise ValueError(f"checkpoint tags are {SPACE}/NAME, one per class: {bad or sorted(tags)}")
        self.classes = dict(tags)
        self.tags = {cls: tag for tag, cls in tags.items()}

    def tagged(self, value: Any) -> Any:
        """`value` with each object of a tagged type in it (dicts, lists and tuples are walked)
        as its msgpack extension, named by its tag. An object of warpsmith's own without a tag
        is an error: the checkpoint would name its module."""
        tag = self.tags.get(type(value))
        if tag is not None:
            return self._extension(tag, value)
        if isinstance(value, dict):
            return {k: self.tagged(v) for k, v in value.items()}
        if isinstance(value, list) or type(value) is tuple:  # (LangGraph writes a named tuple by its fields)
            return [self.tagged(v) for v in value]  # msgpack has one kind of array: a tuple reads back as a list
        if type(value).__module__.partition(".")[0] == SPACE:
            raise TypeError(f"checkpoint: {type(value).__qualname__} has no tag (agent/loop/state.py STATE_TAGS)")
        return value

    def _extension(self, tag: str, value: Any) -> ormsgpack.Ext:
        space, _, name = tag.partition("/")
        if isinstance(value, BaseModel):
            return _extension(EXT_PYDANTIC_V2, (space, name, self.tagged(value.model_dump()), "model_validate_json"))
        if isinstance(value, enum.Enum):
            return _extension(EXT_CONSTRUCTOR_SINGLE_ARG, (space, name, value.value))
        if dataclasses.is_dataclass(value):
            fields = {f.name: self.tagged(getattr(value, f.name)) for f in dataclasses.fields(value)}
            return _extension(EXT_CONSTRUCTOR_KW_ARGS, (space, name, fields))
        raise TypeError(f"checkpoint: {tag} is not a pydantic model, an enum or a dataclass")

    def ext_hook(self, code: int, data: bytes) -> Any:
        """ormsgpack's ext_hook: a type named by its tag or by an old module path (legacy_names)
        is rebuilt from the table; anything else as LangGraph reads it."""
        if code in TYPED_EXTS:
            module, name, arg = ormsgpack.unpackb(data, ext_hook=self.ext_hook, option=ormsgpack.OPT_NON_STR_KEYS)[:3]
            cls = self.classes.get(f"{SPACE}/{name}" if module == SPACE else LEGACY_TAGS.get((module, name), ""))
            if cls is not None:
                return _rebuild(code, cls, arg)
        return _LANGGRAPH.loads_typed(("msgpack", ormsgpack.packb(ormsgpack.Ext(code, data))))

    def loads(self, data: bytes) -> Any:
        """What dumps_typed's msgpack bytes held."""
        return ormsgpack.unpackb(data, ext_hook=self.ext_hook, option=ormsgpack.OPT_NON_STR_KEYS)


def _extension(code: int, payload: tuple[Any, ...]) -> ormsgpack.Ext:
    _, data = _LANGGRAPH.dumps_typed(payload)  # a tuple: always msgpack
    return ormsgpack.Ext(code, data)


def _rebuild(code: int, cls: type, arg: Any) -> Any:
    if code == EXT_PYDANTIC_V2 and issubclass(cls, BaseModel):
        try:
            return cls(**arg)
        except ValidationError:  # a record an older version wrote: kept as stored, as LangGraph does
            return cls.model_construct(**arg)
    if code == EXT_CONSTRUCTOR_SINGLE_ARG:
        return cls(arg)
    return cls(**arg)
