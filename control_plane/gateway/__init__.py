"""The messaging gateway: one agent reached from chat platforms (Telegram, a signed webhook)."""

from .gateway import Gateway, GatewayLocked
from .platforms import UnknownTarget, create_gateway, send_message

__all__ = ["Gateway", "GatewayLocked", "UnknownTarget", "create_gateway", "send_message"]
