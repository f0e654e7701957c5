"""What the front ends (screens, the app) name of the layers under the use cases: the host type and
its error, and the storage scan's records. Screens and the app import these from here, never from
``core.hosts`` (an import contract holds it): they reach a host only through ``Ops``' use cases.

This module is light (no store, no deployer): a screen may import it when it is first drawn."""

from __future__ import annotations

from .hosts.host import Host, HostError
from .hosts.model_copies import Deleted, HostStorage, ModelCopy, refusal_for

__all__ = ["Deleted", "Host", "HostError", "HostStorage", "ModelCopy", "refusal_for"]
