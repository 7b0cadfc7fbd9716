"""The messaging gateway: one agent reached from chat platforms (Telegram, a signed webhook)."""

from .gateway import Gateway
from .platforms import UnknownTarget, create_gateway, send_message
from .records import GatewayLocked

__all__ = ["Gateway", "GatewayLocked", "UnknownTarget", "create_gateway", "send_message"]
