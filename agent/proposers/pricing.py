"""What the model costs: tokens by kind from each call's usage metadata, dollars
from a price table (USD per million tokens).

The defaults are OpenAI's published list prices for the models warpsmith is used
with, as of when this table was written; check them against the current price
page and override them in a TOML file (`--prices FILE`, else
``$XDG_CONFIG_HOME/warpsmith/prices.toml`` or ``~/.config/warpsmith/prices.toml``):

    [models."gpt-5-mini"]
    input = 0.25
    cached_input = 0.025
    output = 2.0

A server given with --base-url that is not OpenAI's costs 0 unless the file
names its model. Reasoning tokens are billed as output tokens (they are part of
the output count).
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional


@dataclass(frozen=True)
class Usage:
    input: int = 0
    cached_input: int = 0  # part of input
    output: int = 0
    reasoning: int = 0  # part of output

    @property
    def total(self) -> int:
        return self.input + self.output

    def __add__(self, o: "Usage") -> "Usage":
        return Usage(self.input + o.input, self.cached_input + o.cached_input, self.output + o.output,
                     self.reasoning + o.reasoning)

    @staticmethod
    def from_metadata(meta: Optional[Mapping[str, Any]]) -> "Usage":
        """LangChain's usage_metadata (input_tokens, output_tokens, *_token_details)."""
        meta = meta or {}
        return Usage(int(meta.get("input_tokens", 0)), int((meta.get("input_token_details") or {}).get("cache_read", 0)),
                     int(meta.get("output_tokens", 0)), int((meta.get("output_token_details") or {}).get("reasoning", 0)))


@dataclass(frozen=True)
class Price:
    input: float  # USD per million tokens
    cached_input: float
    output: float

    def cost(self, u: Usage) -> float:
        return ((u.input - u.cached_input) * self.input + u.cached_input * self.cached_input
                + u.output * self.output) / 1e6


DEFAULT_PRICES = {
    "gpt-5": Price(1.25, 0.125, 10.0),
    "gpt-5-mini": Price(0.25, 0.025, 2.0),
    "gpt-5-nano": Price(0.05, 0.005, 0.40),
    "gpt-4.1": Price(2.0, 0.50, 8.0),
    "gpt-4.1-mini": Price(0.40, 0.10, 1.60),
    "gpt-4o": Price(2.50, 1.25, 10.0),
    "gpt-4o-mini": Price(0.15, 0.075, 0.60),
    "o3": Price(2.0, 0.50, 8.0),
    "o4-mini": Price(1.10, 0.275, 4.40),
}
FREE = Price(0.0, 0.0, 0.0)


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "warpsmith" / "prices.toml"


@dataclass(frozen=True)
class PriceTable:
    defaults: dict[str, Price]
    user: dict[str, Price]  # from the TOML file: wins, and alone prices a non-OpenAI server


def load_prices(path: Optional[Path] = None) -> PriceTable:
    """The defaults and the TOML file's prices (if there is one)."""
    prices: dict[str, Price] = {}
    if path is not None and not path.is_file():  # only the default file may be absent
        raise ValueError(f"--prices {path}: no such file")
    path = path or config_path()
    if path.is_file():
        try:
            models = tomllib.loads(path.read_text()).get("models", {})
            for name, p in models.items():
                prices[name] = Price(float(p["input"]), float(p.get("cached_input", p["input"])), float(p["output"]))
        except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{path}: a price table has [models.\"NAME\"] input, cached_input, output "
                             f"(USD per million tokens): {e}") from None
    return PriceTable(dict(DEFAULT_PRICES), prices)


def price_for(model: str, base_url: Optional[str], table: PriceTable) -> Optional[Price]:
    """The model's price; FREE on a non-OpenAI server the user's file does not price; None if unknown."""
    if model in table.user:
        return table.user[model]
    if base_url and "api.openai.com" not in base_url:
        return FREE
    prices = {**table.defaults, **table.user}
    if model in prices:
        return prices[model]
    # Dated snapshots ("gpt-5-mini-2025-08-07") and "-latest" cost what their model costs;
    # other suffixes ("-nano", "-pro", "-mini") are other models with other prices.
    base = re.sub(r"-(\d{4}-\d{2}-\d{2}|latest)$", "", model)
    return prices.get(base)
