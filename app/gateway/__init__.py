from app.gateway.gateway import Gateway, Grant

__all__ = ["Gateway", "Grant"]
