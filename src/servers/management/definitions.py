"""Definitions export and import."""

from __future__ import annotations

from typing import Any

from .base import ApiBase
from .request import Request, bad_request

#: sections of a definitions file that must be lists
_DEFINITION_LISTS = ("users", "vhosts", "permissions", "policies", "queues", "exchanges", "bindings",
                     "parameters", "global_parameters", "topic_permissions")
#: path segments naming an exchange, by the path's first segment

class DefinitionRoutes(ApiBase):
    """Definitions export and import."""

    def get_definitions(self, req: Request, vhost: str | None = None) -> Any:
        self._admin(req)
        if vhost is not None:
            self._check_vhost(req, vhost)
        doc = self.call(lambda b: b.export_definitions())
        if vhost is not None:  # RabbitMQ's per-vhost export: the vhost's objects, no users or vhosts
            doc = {k: [e for e in v if e.get("vhost") == vhost] if isinstance(v, list) else v
                   for k, v in doc.items() if k not in ("users", "vhosts", "permissions", "topic_permissions")}
        return doc

    def post_definitions(self, req: Request, vhost: str | None = None) -> Any:
        self._admin(req)
        doc = req.json()
        if vhost is not None:
            self._check_vhost(req, vhost)
            doc = {k: [dict(e, vhost=vhost) if isinstance(e, dict) else e for e in v] if isinstance(v, list) else v
                   for k, v in doc.items() if k not in ("users", "vhosts", "permissions")}
        for key, value in doc.items():
            if key in _DEFINITION_LISTS and not isinstance(value, list):
                raise bad_request(f"'{key}' must be a list")
        self._command_400(lambda b: b.import_definitions(doc))
        return None
