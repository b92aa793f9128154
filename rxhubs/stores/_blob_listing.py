"""Listing blobs with their metadata, parsed with the standard library's XML parser.

Every balancing round lists the ownership records, and a consumer awaiting a handover lists them every 20 ms.
azure-storage-blob turns the List Blobs answer into objects through its generated deserializer: 7.6 ms of CPU for
32 ownership blobs here, against 1.7 ms for the same request sent through the same client's pipeline (the same
authentication, retries and transport) and read with :mod:`xml.etree.ElementTree`; 11.5 ms against 4.6 ms from
request to result. On a consumer taken over 16 partitions at once, the looks' parsing was what its event loop did
most while it opened their links.

The request is the one ``ContainerClient.list_blobs(name_starts_with=prefix, include=["metadata"])`` sends. It goes
through the generated client's ``_send_request`` (azure-core's documented way to send a request through a client's
pipeline); when that is missing, or the answer is anything but a 200 that parses, :func:`list_blobs` returns None and
the store lists through the SDK as before, which raises its usual errors.
"""

from __future__ import annotations

import email.utils
import xml.etree.ElementTree as ET
from typing import Any
from urllib.parse import quote, unquote

from rxhubs.stores._common import normalize_etag

__all__ = ["Listed", "Under", "list_blobs", "list_under", "parse_listing", "partitions_under"]

#: ``(blob name, metadata with lower-cased keys, etag, last modified in seconds since the epoch, size in bytes)``.
Listed = tuple[str, dict[str, str], "str | None", "float | None", "int | None"]
#: ``(partition id, metadata with lower-cased keys, etag without quotes, last modified)`` of a blob under a prefix.
Under = tuple[str, dict[str, str], "str | None", "float | None"]


async def list_blobs(client: Any, prefix: str, page_size: int | None = None) -> list[Listed] | None:
    """The blobs whose names start with ``prefix``, page after page; None: list through the SDK instead.

    ``page_size``: blobs per request (the service's default, 5,000, when None). Transport failures raise as they
    would from the SDK (``AzureError``, ``OSError``).
    """
    send = getattr(getattr(client, "_client", None), "_send_request", None)
    version, url = getattr(client, "api_version", None), getattr(client, "url", None)
    if not callable(send) or not isinstance(version, str) or not isinstance(url, str):
        return None
    from azure.core.rest import HttpRequest

    found: list[Listed] = []
    marker = ""
    while True:
        query = f"restype=container&comp=list&include=metadata&prefix={quote(prefix, safe='')}"
        if marker:
            query += f"&marker={quote(marker, safe='')}"
        if page_size is not None:
            query += f"&maxresults={page_size}"
        joined = f"{url}&{query}" if "?" in url else f"{url}?{query}"  # a SAS token in the URL stays in it
        request = HttpRequest("GET", joined, headers={"x-ms-version": version, "Accept": "application/xml"})
        response = await send(request)
        if response.status_code != 200:
            return None
        page = parse_listing(await response.read())
        if page is None:
            return None
        blobs, marker = page
        found += blobs
        if not marker:
            return found


def parse_listing(body: bytes) -> tuple[list[Listed], str] | None:
    """A List Blobs answer's blobs and its next marker (``""`` on the last page); None if it is not one.

    Example:
        >>> body = (b'<EnumerationResults><Blobs><Blob><Name>ns/hub/g/ownership/0</Name><Properties>'
        ...         b'<Last-Modified>Fri, 27 Nov 2026 02:12:13 GMT</Last-Modified><Etag>0x8DC</Etag></Properties>'
        ...         b'<Metadata><OwnerId /></Metadata></Blob></Blobs><NextMarker /></EnumerationResults>')
        >>> parse_listing(body)
        ([('ns/hub/g/ownership/0', {'ownerid': ''}, '0x8DC', 1795745533.0, None)], '')
        >>> parse_listing(b"<Error><Code>Busy</Code></Error>") is None
        True
    """
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return None
    blobs = root.find("Blobs")
    if root.tag != "EnumerationResults" or blobs is None:
        return None
    found: list[Listed] = []
    for blob in blobs.iter("Blob"):
        name_element, properties = blob.find("Name"), blob.find("Properties")
        if name_element is None or properties is None:
            return None
        name = name_element.text or ""
        if name_element.get("Encoded") == "true":  # a name the service percent-encodes (characters XML cannot carry)
            name = unquote(name)
        listed_metadata = blob.find("Metadata")
        children = list(listed_metadata) if listed_metadata is not None else []
        metadata = {child.tag.lower(): child.text or "" for child in children}  # an empty value (released): ""
        modified = properties.findtext("Last-Modified")
        try:
            seconds = email.utils.parsedate_to_datetime(modified).timestamp() if modified else None
        except (TypeError, ValueError):
            return None
        length = properties.findtext("Content-Length")
        size = int(length) if length and length.isdigit() else None
        found.append((name, metadata, properties.findtext("Etag"), seconds, size))
    return found, root.findtext("NextMarker") or ""


async def list_under(client: Any, prefix: str) -> list[Listed]:
    """The blobs whose names start with ``prefix``: :func:`list_blobs`, else through the SDK's ``list_blobs``."""
    listed = await list_blobs(client, prefix)
    if listed is not None:
        return listed
    found: list[Listed] = []
    async for blob in client.list_blobs(name_starts_with=prefix, include=["metadata"]):
        # An empty metadata value (a released owner) is listed as None: read it as "".
        metadata = {str(k).lower(): "" if v is None else str(v) for k, v in (blob.metadata or {}).items()}
        modified = blob.last_modified.timestamp() if blob.last_modified is not None else None
        found.append((blob.name, metadata, blob.etag, modified, blob.size))
    return found


async def partitions_under(client: Any, prefix: str) -> tuple[list[Under], list[str]]:
    """The blobs right under ``prefix``, by partition id; and the names of the foreign ones (deeper, or the prefix)."""
    found: list[Under] = []
    foreign: list[str] = []
    for name, metadata, etag, modified, _size in await list_under(client, prefix):
        partition_id = name[len(prefix) :]
        if not partition_id or "/" in partition_id:
            foreign.append(name)
            continue
        found.append((partition_id, metadata, normalize_etag(etag), modified))
    return found, foreign
