"""Azure Schema Registry in the emulator: the REST API the official ``azure-schemaregistry`` client calls, over HTTPS.

Three operations, as the service answers them (the client's generated code is the reference: status codes and
headers it reads):

* ``PUT /$schemaGroups/{group}/schemas/{name}`` (body: the schema text; ``Content-Type`` its format, e.g.
  ``application/json; serialization=Avro``): register. 204 with ``Schema-Id``, ``Schema-Group-Name``,
  ``Schema-Name``, ``Schema-Version``, ``Location``, ``Schema-Id-Location``. The same content again gives the
  same id; new content under a name is its next version.
* ``POST /$schemaGroups/{group}/schemas/{name}:get-id`` (body: the schema text): the id of that content, 204 with
  the same headers; 404 when it was never registered.
* ``GET /$schemaGroups/$schemas/{id}``: 200, the schema text, with the same headers and its ``Content-Type``.

Every request needs ``Authorization: Bearer ...`` (azure-core sends bearer tokens over HTTPS only, hence TLS);
without one: 401. Schemas live in memory, for the emulator's lifetime.
"""

from __future__ import annotations

import ssl
import uuid
from dataclasses import dataclass
from typing import Any

__all__ = ["SchemaRegistry"]


@dataclass(frozen=True, slots=True)
class _Schema:
    id: str
    group: str
    name: str
    version: int
    content_type: str
    text: str


class SchemaRegistry:
    """The registry's schemas and its HTTPS endpoint (an aiohttp application on the TLS certificate)."""

    def __init__(self) -> None:
        self.by_id: dict[str, _Schema] = {}
        self._by_content: dict[tuple[str, str, str], _Schema] = {}
        self._versions: dict[tuple[str, str], int] = {}
        self._runner: Any = None
        self.port: int | None = None

    def register(self, group: str, name: str, text: str, content_type: str) -> _Schema:
        """Register ``text`` under ``group``/``name`` (the same content: the same schema)."""
        key = (group.casefold(), name.casefold(), text)
        found = self._by_content.get(key)
        if found is not None:
            return found
        version = self._versions.get(key[:2], 0) + 1
        self._versions[key[:2]] = version
        schema = _Schema(uuid.uuid4().hex, group, name, version, content_type, text)
        self._by_content[key] = self.by_id[schema.id] = schema
        return schema

    def _headers(self, schema: _Schema) -> dict[str, str]:
        return {
            "Schema-Id": schema.id,
            "Schema-Group-Name": schema.group,
            "Schema-Name": schema.name,
            "Schema-Version": str(schema.version),
            "Location": f"/$schemaGroups/{schema.group}/schemas/{schema.name}/versions/{schema.version}",
            "Schema-Id-Location": f"/$schemaGroups/$schemas/{schema.id}",
        }

    async def start(self, host: str, port: int, context: ssl.SSLContext) -> int:
        """Serve the API over HTTPS on ``port`` (0: a free one); return the port."""
        from aiohttp import web

        @web.middleware
        async def authorized(request: Any, handler: Any) -> Any:
            if not request.headers.get("Authorization", "").startswith("Bearer "):
                return self._error(401, "Unauthorized", "a bearer token is required (Authorization: Bearer ...)")
            return await handler(request)

        app = web.Application(middlewares=[authorized])
        app.router.add_put("/$schemaGroups/{group}/schemas/{name}", self._put)
        app.router.add_post("/$schemaGroups/{group}/schemas/{name}:get-id", self._get_id)
        app.router.add_get("/$schemaGroups/$schemas/{id}", self._get)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=context)
        await site.start()
        server = site._server  # the listening socket, for the port picked
        assert server is not None
        self.port = int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
        return self.port

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    @staticmethod
    def _error(status: int, code: str, message: str) -> Any:
        from aiohttp import web

        return web.json_response({"error": {"code": code, "message": message}}, status=status)

    async def _put(self, request: Any) -> Any:
        from aiohttp import web

        text = await request.text()
        content_type = request.headers.get("Content-Type", "application/json; serialization=Avro")
        schema = self.register(request.match_info["group"], request.match_info["name"], text, content_type)
        return web.Response(status=204, headers=self._headers(schema))

    async def _get_id(self, request: Any) -> Any:
        from aiohttp import web

        text = await request.text()
        key = (request.match_info["group"].casefold(), request.match_info["name"].casefold(), text)
        schema = self._by_content.get(key)
        if schema is None:
            return self._error(404, "ItemNotFound", "no schema with this content is registered under this name")
        return web.Response(status=204, headers=self._headers(schema))

    async def _get(self, request: Any) -> Any:
        from aiohttp import web

        schema = self.by_id.get(request.match_info["id"])
        if schema is None:
            return self._error(404, "ItemNotFound", f"schema id {request.match_info['id']!r} not found")
        return web.Response(status=200, body=schema.text.encode(),
                            headers={**self._headers(schema), "Content-Type": schema.content_type})
