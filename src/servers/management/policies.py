"""Policies per vhost."""

from __future__ import annotations

from typing import Any

from engine.model.policies import Policy

from .base import ApiBase
from .request import Request, bad_request, not_found, put_status, unauthorised


class PolicyRoutes(ApiBase):
    """Policies per vhost."""

    def policies(self, req: Request, vhost: str | None = None) -> Any:
        if vhost is not None:
            self._check_vhost(req, vhost)
        return [p for p in self.snap()["policies"] if req.principal.sees_vhost(p["vhost"])
                and (vhost is None or p["vhost"] == vhost)]

    def policy(self, req: Request, vhost: str, name: str) -> Any:
        for p in self.policies(req, vhost):
            if p["name"] == name:
                return p
        raise not_found()

    def _policymaker(self, req: Request, vhost: str) -> None:
        self._check_vhost(req, vhost)
        who = req.principal
        if not (who.is_admin or (who.makes_policies and vhost in who.permissions)):
            raise unauthorised("User not authorised to access object")

    def put_policy(self, req: Request, vhost: str, name: str) -> Any:
        self._policymaker(req, vhost)
        body = req.json()
        existed = any(p["name"] == name for p in self.policies(req, vhost))
        doc = {"vhost": vhost, "name": name, "pattern": body.get("pattern"), "definition": body.get("definition"),
               "priority": body.get("priority", 0), "apply-to": body.get("apply-to", "all")}
        if not isinstance(doc["pattern"], str) or not isinstance(doc["definition"], dict):
            raise bad_request("pattern (a string) and definition (an object) are required")
        self._command_400(lambda b: b.set_policy(Policy.from_json(doc)))
        return put_status(existed)

    def delete_policy(self, req: Request, vhost: str, name: str) -> Any:
        self.policy(req, vhost, name)
        self._policymaker(req, vhost)
        self.command(lambda b: b.delete_policy(vhost, name))
        return None

